"""Where the rows past the first of a forward pass go: a verifying pass of r rows (drafted
tokens, docs/engine.md "Speculative decoding") split by ONNX Runtime's profiler into the layers'
GGUF products per format, the output head, DecodeAttention, the other nodes and the host.

One thread; row counts interleaved after a 60-token prompt, the cache cut back after each
pass (as scripts/verify_cost.py). Per row count: the median pass (one thread's CPU time, the
profiler's own cost included) and the median of each group's node time, in ms and as what the
group adds over its one-row time, per extra row, in one-row passes.

    PYTHONPATH=. .venv/bin/python scripts/rows_profile.py FOLDER [--rows 1,2,4,7] [--repeats 9]
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HEAD_PREFIXES = ("lm_head", "embed", "/lm_head", "/embed")


def node_groups(model: Path) -> dict[str, str]:
    """Node name -> group: 'head Q8_0' for the output projection, 'GgufMatMul Q4_1' for the
    layers' products, else the op type."""
    import onnx

    from chatapp.folder_format.graph import all_nodes

    graph = onnx.load(str(model), load_external_data=False).graph
    groups = {}
    for node in all_nodes(graph):
        group = node.op_type
        if node.op_type == "GgufMatMul":
            qtype = next(a.s.decode() for a in node.attribute if a.name == "qtype")
            weight = node.input[1] if len(node.input) > 1 else ""
            head = weight.startswith(HEAD_PREFIXES)
            group = f"{'head' if head else 'GgufMatMul'} {qtype}"
        groups[node.name] = group
    return groups


def run_groups(events: list[dict[str, Any]], groups: dict[str, str]) -> list[dict[str, float]]:
    """Each model_run's node times (ms) per group, in run order."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("name") == "model_run")
    out: list[dict[str, float]] = [defaultdict(float) for _ in spans]
    starts = [s for s, _ in spans]
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        i = bisect.bisect_right(starts, e["ts"]) - 1
        if i < 0 or e["ts"] > spans[i][1]:
            continue
        name = e["name"][: -len("_kernel_time")]
        group = groups.get(name, e.get("args", {}).get("op_name", "?"))
        if group != "If":  # an If's time is its branch's nodes'
            out[i][group] += e["dur"] / 1000.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rows", default="1,2,4,7")
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()

    from chatapp.engine import devices
    from chatapp.engine.engine import Engine

    prefix = Path(tempfile.mkdtemp()) / "rows_profile"
    plain = devices.session_options

    def profiling(threads: int | None = None, precision: str | None = None) -> Any:
        opts = plain(threads, precision)
        opts.enable_profiling = True
        opts.profile_file_prefix = str(prefix)
        return opts

    devices.session_options = profiling  # type: ignore[assignment]
    engine = Engine(args.folder, precision="fast", threads=1)
    loop = engine.loop()
    prompt = list(range(100, 160))
    loop.prepare(prompt)
    loop.forward(prompt)
    base = len(loop.cached)
    counts = [int(r) for r in args.rows.split(",")]
    for rows in counts:  # warm-up
        loop.rollback(len(loop.cached) - base)
        loop.forward(list(range(200, 200 + rows)), all_logits=True)
    load = os.getloadavg()
    order: list[int] = []
    cpu: dict[int, list[float]] = {r: [] for r in counts}
    for _ in range(args.repeats):
        for rows in counts:
            loop.rollback(len(loop.cached) - base)
            started = time.thread_time()
            loop.forward(list(range(200, 200 + rows)), all_logits=True)
            cpu[rows].append((time.thread_time() - started) * 1000.0)
            order.append(rows)
    events = json.loads(Path(engine.session.end_profiling()).read_text())
    native = args.folder / "model_gguf.onnx"
    graph = native if native.is_file() else args.folder / "model.onnx"
    runs = run_groups(events, node_groups(graph))[-len(order) :]
    by_rows: dict[int, list[dict[str, float]]] = {r: [] for r in counts}
    for rows, groups in zip(order, runs, strict=True):
        by_rows[rows].append(groups)
    names = sorted({g for r in runs for g in r}, key=lambda g: -sum(r.get(g, 0.0) for r in runs))
    print(f"{engine.info.name}; one thread's CPU, {args.repeats} repeats, profiler on")
    print(f"load average before {load}, after {os.getloadavg()}")
    one = statistics.median(cpu[counts[0]])
    table: dict[int, dict[str, float]] = {}
    for rows in counts:
        med = {g: statistics.median(r.get(g, 0.0) for r in by_rows[rows]) for g in names}
        med["nodes"] = statistics.median(sum(r.values()) for r in by_rows[rows])
        med["pass"] = statistics.median(cpu[rows])
        med["host (pass - nodes)"] = med["pass"] - med["nodes"]
        table[rows] = med
    cols = ["pass", *names, "nodes", "host (pass - nodes)"]
    print(
        "| group | "
        + " | ".join(f"{r} rows ms" for r in counts)
        + " | "
        + " | ".join(f"{r}: per extra row" for r in counts[1:])
        + " |"
    )
    print("|---|" + "---:|" * (2 * len(counts) - 1))
    for g in cols:
        ms = [table[r][g] for r in counts]
        extra = [
            (table[r][g] - table[counts[0]][g]) / (r - counts[0]) / one if r > counts[0] else 0.0
            for r in counts[1:]
        ]
        print(
            f"| {g} | "
            + " | ".join(f"{v:.2f}" for v in ms)
            + " | "
            + " | ".join(f"{e:.3f}" for e in extra)
            + " |"
        )


if __name__ == "__main__":
    main()
