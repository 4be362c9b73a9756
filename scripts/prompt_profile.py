"""Where one prompt's time goes in a model folder: ONNX Runtime's profiler, grouped.

Runs the prompt once to warm up and once profiled (SessionOptions.enable_profiling), then sums
the profiled run's node times: GgufMatMul by GGUF format, the other operators by type. Prints a
Markdown table (ms, share of the nodes' total) with the run's wall time, this process's user
CPU time over the run and the load average, since a shared machine slows every figure.

    .venv/bin/python scripts/prompt_profile.py FOLDER --tokens 42,1000 [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROMPT = "What is the capital of France? Answer in one sentence."


# An If's own time is its branch's nodes' (which the profiler lists too): not counted twice.
CONTAINERS = {"If"}


def node_groups(model: Path) -> dict[str, str]:
    """Node name -> its group: 'GgufMatMul Q4_K' for the native matrices, else the op type
    (the nodes inside the step/prompt If's branches too)."""
    import onnx

    from chatapp.folder_format.graph import all_nodes

    graph = onnx.load(str(model), load_external_data=False).graph
    groups = {}
    for node in all_nodes(graph):
        group = node.op_type
        if node.op_type == "GgufMatMul":
            qtype = next(a.s.decode() for a in node.attribute if a.name == "qtype")
            group = f"GgufMatMul {qtype}"
        groups[node.name] = group
    return groups


def profiled_runs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The second half of the model_run events: the profiled prompt (a long prompt runs in
    chunks of 512 tokens; the warm-up ran the same chunks before it)."""
    runs = [e for e in events if e.get("name") == "model_run"]
    return runs[len(runs) // 2 :]


def group_times(events: list[dict[str, Any]], groups: dict[str, str]) -> dict[str, float]:
    start = profiled_runs(events)[0]["ts"]
    totals: dict[str, float] = defaultdict(float)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        if e["ts"] < start:
            continue
        name = e["name"][: -len("_kernel_time")]
        group = groups.get(name, e.get("args", {}).get("op_name", "?"))
        if group not in CONTAINERS:
            totals[group] += e["dur"] / 1000.0
    return dict(totals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--tokens", default="42,1000")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    from chatapp.engine import devices
    from chatapp.engine.bench.run import bench_prompt_ids, fixed_length
    from chatapp.engine.engine import Engine

    prefix = Path(tempfile.mkdtemp()) / "prompt_profile"
    plain = devices.session_options

    def profiling(threads: int | None = None, prompt: str | None = None) -> Any:
        opts = plain(threads, prompt)
        opts.enable_profiling = True
        opts.profile_file_prefix = str(prefix)
        return opts

    devices.session_options = profiling
    for length in [int(t) for t in args.tokens.split(",")]:
        engine = Engine(args.folder, mode="iobinding", threads=args.threads)
        ids = bench_prompt_ids(engine, PROMPT, length if length > 60 else None)
        fixed_length(engine, ids, "iobinding", 1).run()
        load = os.getloadavg()
        cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime, time.perf_counter()
        fixed_length(engine, ids, "iobinding", 1).run()
        wall = time.perf_counter() - wall0
        cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
        events = json.loads(Path(engine.session.end_profiling()).read_text())
        graph = next(args.folder.glob("model*.onnx"))
        totals = group_times(events, node_groups(graph))
        run_ms = sum(r["dur"] for r in profiled_runs(events)) / 1000.0
        nodes = sum(totals.values())
        print(
            f"\n{len(ids)} prompt tokens, {args.threads} threads: run {run_ms:.0f} ms "
            f"(wall {wall * 1000:.0f} ms, user CPU {cpu * 1000:.0f} ms), "
            f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n"
        )
        print("| nodes | ms | share |\n|---|---:|---:|")
        for group, ms in sorted(totals.items(), key=lambda kv: -kv[1]):
            print(f"| {group} | {ms:.1f} | {100 * ms / nodes:.1f}% |")
        del engine


if __name__ == "__main__":
    main()
