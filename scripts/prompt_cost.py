"""Peak memory and time to first token against the prompt's length, one process per run.

Compares model folders (e.g. a folder converted before logits_positions existed and one
after) on bench prompts of several lengths. Each run is its own process, so its peak RSS
(ru_maxrss: model, KV, activations and logits together) is that run's alone; runs are
interleaved folder by folder and repeat by repeat, and ratios are medians of per-repeat
ratios against the first folder. Linux / macOS (the resource module).

    .venv/bin/python scripts/prompt_cost.py OLD_FOLDER NEW_FOLDER --lengths 42,1000,2000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

PROMPT = "What is the capital of France? Answer in one sentence."


def child(folder: str, length: int, mode: str, threads: int) -> None:
    import resource

    from chatapp.engine.bench.run import bench_prompt_ids, fixed_length
    from chatapp.engine.engine import Engine

    engine = Engine(folder, mode=mode, threads=threads)
    ids = bench_prompt_ids(engine, PROMPT, length if length > 60 else None)
    fixed_length(engine, ids, mode, 4).run()  # warm-up: onnxruntime's first runs of a shape
    stats = fixed_length(engine, ids, mode, 8).run()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    print(
        json.dumps(
            {
                "prompt_tokens": len(ids),
                "ttft_s": stats.ttft_s,
                "peak_rss_mb": peak_kb * scale / 1e6,
                "prompt_perplexity": stats.prompt_perplexity,
                "scored": len(stats.prompt_logprobs),
            }
        )
    )


def measure(folder: str, length: int, mode: str, threads: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", folder, str(length), mode, str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ.copy())
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", help="model folders; the first is the reference")
    parser.add_argument("--lengths", default="42,1000,2000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", default="iobinding", choices=["iobinding", "naive"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in range(args.repeats):
        for length in lengths:
            order = args.folders if r % 2 == 0 else args.folders[::-1]
            for folder in order:
                res = measure(folder, length, args.mode, args.threads)
                runs.setdefault((folder, length), []).append(res)
                print(
                    f"repeat {r + 1} {Path(folder).parent.parent.name}/{Path(folder).name} "
                    f"{res['prompt_tokens']:5d} tokens: TTFT {res['ttft_s'] * 1000:7.1f} ms, "
                    f"peak RSS {res['peak_rss_mb']:6.0f} MB",
                    flush=True,
                )
    ref = args.folders[0]
    print(f"\n{args.mode}, {args.threads} threads, medians of {args.repeats} repeats")
    print("| folder | prompt tokens | TTFT ms | TTFT / first folder | peak RSS MB |")
    print("|---|---:|---:|---:|---:|")
    for length in lengths:
        for folder in args.folders:
            mine = runs[(folder, length)]
            ratios = [
                a["ttft_s"] / b["ttft_s"] for a, b in zip(mine, runs[(ref, length)], strict=True)
            ]
            print(
                f"| {folder} | {mine[0]['prompt_tokens']} "
                f"| {statistics.median(m['ttft_s'] for m in mine) * 1000:.0f} "
                f"| {statistics.median(ratios):.2f} "
                f"| {statistics.median(m['peak_rss_mb'] for m in mine):.0f} |"
            )
    loadavg = Path("/proc/loadavg")
    print("load average:", loadavg.read_text().strip() if loadavg.exists() else "?")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
    else:
        main()
