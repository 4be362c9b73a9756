"""CPU time per decode step and per prompt token of model folders, one thread, interleaved.

On a shared, busy machine wall-clock tokens/s mostly measure the other processes; the CPU time a
single-threaded session spends per step (time.process_time) is what the graph itself costs. Each
folder runs in its own process per repeat; ratios are medians of per-repeat ratios against the
first folder.

    .venv/bin/python scripts/step_cpu_cost.py STOCK_FOLDER NATIVE_FOLDER [--prompt 42] [--steps 32]

A folder given as FOLDER@fast or FOLDER@exact runs its native kernels at that precision
(CHATAPP_GGUF_PRECISION, the library's fallback where the session names none); the same folder
may be given with both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def child(folder: str, prompt: int, steps: int, text: str, answer_rows: bool) -> None:
    import time

    from chatapp.engine.bench.run import bench_prompt_ids
    from chatapp.engine.engine import Engine
    from chatapp.engine.generation import prompt_sample

    engine = Engine(Path(folder), threads=1, mode="iobinding")
    ids = bench_prompt_ids(engine, text, prompt if prompt > 60 else None)
    loop = engine.loop()
    loop.reset()
    loop.forward(ids[:8])  # warm-up: sessions allocate on their first runs
    loop.forward([ids[8]])
    loop.reset()
    # --answer-rows: the logits rows an answer asks of its prompt (generation.py: the sampled
    # prompt-perplexity rows and the last), as the time to first token pays for them
    rows = [*prompt_sample(len(ids), loop.info.vocab_size), len(ids) - 1] if answer_rows else None
    start = time.process_time()
    out = loop.forward(ids, rows=rows) if rows else loop.forward(ids)
    if rows:
        print(f"prompt {len(ids)} tokens, logits rows {len(rows)}", file=sys.stderr)
    prefill = time.process_time() - start
    token = int(out.logits[-1].argmax()) if rows else int(out.logits.argmax())
    start = time.process_time()
    for _ in range(steps):
        token = int(loop.forward([token]).logits.argmax())
    step = (time.process_time() - start) / steps
    print(json.dumps({"prefill_ms": prefill * 1e3, "step_ms": step * 1e3}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--prompt", type=int, default=42)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    parser.add_argument(
        "--text",
        default="What is the capital of France?",
        help="the prompt under 61 tokens (answer_memory.py's: 'Explain what a KV cache is in a "
        "few sentences.')",
    )
    parser.add_argument("--answer-rows", action="store_true", help="the answer path's logits rows")
    args = parser.parse_args()
    if args.child:
        child(args.folders[0], args.prompt, args.steps, args.text, args.answer_rows)
        return
    results: dict[str, list[dict[str, float]]] = {f: [] for f in args.folders}
    for _ in range(args.repeats):
        for folder in args.folders:
            path, _, precision = folder.partition("@")
            env = dict(os.environ)
            if precision:
                env["CHATAPP_GGUF_PRECISION"] = precision
            cmd = [sys.executable, __file__, path, "--child", "--prompt", str(args.prompt)]
            cmd += ["--text", args.text, *(["--answer-rows"] if args.answer_rows else [])]
            out = subprocess.run(
                [*cmd, "--steps", str(args.steps)], capture_output=True, text=True, env=env
            )
            line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-300:]
            results[folder].append(json.loads(line))
            load = Path("/proc/loadavg").read_text().split()[:3]
            print(folder, results[folder][-1], "load", " ".join(load), flush=True)
    base = results[args.folders[0]]
    print(f"| folder | prompt {args.prompt}: CPU ms | ratio | step CPU ms | step speed ratio |")
    print("|---|---:|---:|---:|---:|")
    for folder, runs in results.items():
        pre = statistics.median(r["prefill_ms"] for r in runs)
        step = statistics.median(r["step_ms"] for r in runs)
        pre_ratio = statistics.median(
            b["prefill_ms"] / r["prefill_ms"] for b, r in zip(base, runs, strict=True)
        )
        step_ratio = statistics.median(
            b["step_ms"] / r["step_ms"] for b, r in zip(base, runs, strict=True)
        )
        print(f"| {folder} | {pre:.0f} | {pre_ratio:.2f}x | {step:.1f} | {step_ratio:.2f}x |")


if __name__ == "__main__":
    main()
