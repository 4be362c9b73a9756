"""Why a short prompt gains less from a second thread than its CPU time says: the prompt run
(with the logits rows an answer asks for) timed in fresh processes, its first run apart from
the later ones, with each thread's CPU time (/proc/self/task) and the page faults of the run.

    .venv/bin/python scripts/prompt_threads.py FOLDER [--threads 1,2] [--repeats 8] [--runs 4]
        [--text "Explain what a KV cache is in a few sentences."]

Each repeat starts one process per thread count, in turn, and runs the prompt --runs times on
an empty cache; minimums stand beside medians because on a shared machine other jobs only add
time. The first run of a process is what `scripts/answer_memory.py` times (a fresh process per
repeat), the later ones what an answer after the first pays. A run's CPU summed over its
threads against its wall time x threads says how long a thread waited or spun.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = "Explain what a KV cache is in a few sentences."  # answer_memory.py's prompt


def thread_cpu_ms() -> dict[str, float]:
    """Each thread's time on a CPU so far, in ns from schedstat (stat's ticks are 10 ms)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[tid] = int(f.read().split()[0]) / 1e6
        except (OSError, ValueError, IndexError):
            continue
    return out


def child(folder: str, threads: int, runs: int, text: str) -> None:
    import resource
    import time

    sys.path.insert(0, str(ROOT))
    from chatapp.engine.bench.run import bench_prompt_ids
    from chatapp.engine.engine import Engine
    from chatapp.engine.generation import prompt_sample

    engine = Engine(Path(folder), threads=threads)
    ids = bench_prompt_ids(engine, text, None)
    loop = engine.loop("iobinding")
    rows = [*prompt_sample(len(ids), loop.info.vocab_size), len(ids) - 1]
    results = []
    for _ in range(runs):
        loop.reset()
        cpu, faults = thread_cpu_ms(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        started = time.perf_counter()
        loop.forward(ids, rows=rows)
        wall = (time.perf_counter() - started) * 1e3
        after = thread_cpu_ms()
        results.append(
            {
                "wall_ms": wall,
                "cpu_ms": sum(after[t] - cpu.get(t, 0.0) for t in after),
                "busiest_ms": max(after[t] - cpu.get(t, 0.0) for t in after),
                "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults,
            }
        )
    print(json.dumps({"tokens": len(ids), "rows": len(rows), "runs": results}))


def summary(values: list[float]) -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.folder, args.child, args.runs, args.text)
        return
    counts = [int(t) for t in args.threads.split(",")]
    found: dict[int, list[dict]] = {t: [] for t in counts}
    tokens = rows = 0
    for _ in range(args.repeats):
        for t in counts:
            cmd = [
                sys.executable,
                __file__,
                args.folder,
                "--child",
                str(t),
                "--runs",
                str(args.runs),
            ]
            out = subprocess.run([*cmd, "--text", args.text], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"the child failed: {out.stderr.strip().splitlines()[-1:]}")
            got = json.loads(out.stdout.strip().splitlines()[-1])
            tokens, rows = got["tokens"], got["rows"]
            found[t].append(got)
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"{args.folder}: a {tokens}-token prompt, {rows} logits rows; load {load}")
    print("min / median over", args.repeats, "processes")
    print("| threads | run | wall ms | CPU ms, all threads | busiest thread ms | page faults |")
    print("|---:|---|---:|---:|---:|---:|")
    for t in counts:
        for label, pick in (("first", slice(0, 1)), ("later", slice(1, None))):
            runs = [r for got in found[t] for r in got["runs"][pick]]
            if not runs:
                continue
            cells = [summary([r[key] for r in runs]) for key in ("wall_ms", "cpu_ms", "busiest_ms")]
            faults = statistics.median(r["faults"] for r in runs)
            print(f"| {t} | {label} | {' | '.join(cells)} | {faults:.0f} |")


if __name__ == "__main__":
    main()
