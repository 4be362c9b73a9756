"""Where a decode step of N sequences (engine/slots.py) spends its time, against a step of one.

    PYTHONPATH=. .venv/bin/python scripts/batch_step_cost.py [--model DIR] [--slots 4]
        [--steps 40] [--profile]

One engine on one thread; each slot prefills its own prompt, then batched steps of all N slots
and of slot 0 alone (the same `SlotBatch._run`, so the same graph and binding) alternate, each
re-running the same position (the KV stays as the prefill left it). Printed: the process's CPU
time per step (median and minimum over the steps, load-independent enough on a shared machine),
the ratio N rows / 1 row, and the host (Python, binding) part of each. With --profile, ONNX
Runtime's own per-node profile split by operator type (median microseconds per step): which
part of the step (the GGUF matrix products, attention, the rest) grows with the rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import onnxruntime as ort  # noqa: E402

from chatapp.convert.default_model import default_model_dir  # noqa: E402
from chatapp.engine import devices  # noqa: E402
from chatapp.engine.engine import Engine  # noqa: E402

PROMPTS = [
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Write a short poem about the autumn rain falling on the city streets at night.",
    "Explain in simple words why the sky is blue during the day and red at sunset.",
    "List five things to pack for a weekend hiking trip in the mountains, and why.",
]


def profiled(prefix: str) -> None:
    """Make every session this process starts write ONNX Runtime's profile under `prefix`."""
    plain = devices.session_options

    def with_profile(threads: int | None = None, prompt: str | None = None) -> ort.SessionOptions:
        opts = plain(threads, prompt)
        opts.enable_profiling = True
        opts.profile_file_prefix = prefix
        return opts

    devices.session_options = with_profile  # type: ignore[assignment]


def per_op(profile: str, runs: int) -> list[dict[str, float]]:
    """The last `runs` runs' node times (microseconds) summed per operator type."""
    with open(profile) as f:
        events = json.load(f)
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")[
        -runs:
    ]
    out: list[dict[str, float]] = [defaultdict(float) for _ in spans]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        for i, (start, end) in enumerate(spans):
            if start <= e["ts"] <= end:
                out[i][e.get("args", {}).get("op_name", "?")] += e["dur"]
                break
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="batch_step_cost")
    if args.profile:
        profiled(str(Path(tmp) / "ort"))
    engine = Engine(args.model or default_model_dir(), threads=1, max_context=args.context)
    batch = engine.slots(args.slots)
    tok = engine.tokenizer.tok
    last = []
    for i, loop in enumerate(batch.loops):
        loop.reset()
        ids = list(tok.encode(PROMPTS[i % len(PROMPTS)]))
        loop.forward(ids)
        last.append(ids[-1])
    all_rows = dict(enumerate(last))
    one_row = {0: last[0]}
    for _ in range(3):  # warm-up: each step shape's binding is made on its first run
        batch._run(all_rows)
        batch._run(one_row)
    cpu: dict[int, list[float]] = {1: [], args.slots: []}
    host: dict[int, list[float]] = {1: [], args.slots: []}
    for _ in range(args.steps):
        for rows, pending in ((1, one_row), (args.slots, all_rows)):
            c0 = time.process_time()
            steps = batch._run(pending)
            cpu[rows].append(time.process_time() - c0)
            host[rows].append(next(iter(steps.values())).host_s)
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    print(f"{engine.info.name}, 1 thread, {args.steps} steps each, load {load}")
    for rows in (1, args.slots):
        c = cpu[rows]
        print(
            f"{rows} row(s): CPU {statistics.median(c) * 1e3:7.2f} ms a step (min "
            f"{min(c) * 1e3:.2f}), host {statistics.median(host[rows]) * 1e3:.2f} ms"
        )
    ratio = statistics.median(cpu[args.slots]) / statistics.median(cpu[1])
    best = min(cpu[args.slots]) / min(cpu[1])
    print(f"{args.slots} rows / 1 row: {ratio:.2f}x (medians), {best:.2f}x (minimums)")
    if args.profile:
        profile = batch.session.end_profiling()
        runs = per_op(profile, 2 * args.steps)
        ones, manys = runs[0::2], runs[1::2]
        kinds = sorted(
            {k for r in runs for k in r},
            key=lambda k: -statistics.median([r.get(k, 0.0) for r in manys]),
        )
        print(f"{'operator':<28}{'1 row us':>10}{f'{args.slots} rows us':>12}{'ratio':>8}")
        for kind, label in [(k, k) for k in kinds] + [(None, "all nodes")]:
            a = statistics.median(
                sum(r.values()) if kind is None else r.get(kind, 0.0) for r in ones
            )
            b = statistics.median(
                sum(r.values()) if kind is None else r.get(kind, 0.0) for r in manys
            )
            print(f"{label:<28}{a:>10.0f}{b:>12.0f}{b / a if a else float('nan'):>8.2f}")


if __name__ == "__main__":
    main()
