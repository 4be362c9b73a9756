"""One-thread CPU time of a prompt's prefill on two model folders, interleaved in one process.

Made for issue 49: a native graph whose prompts run on GroupQueryAttention (converter version
10) against one whose prompts run on DecodeAttention in a step's float order (version 11). CPU
time of the calling thread with one intra-op thread (ONNX Runtime then runs every kernel on
it), so other processes' load moves it little; the wall time is printed beside it. Runs
alternate folder by folder, repeat by repeat; the ratio is the median of per-repeat ratios.

    .venv/bin/python scripts/prompt_attention_cpu.py OLD_FOLDER NEW_FOLDER --length 1024
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from chatapp.engine.engine import Engine


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs=2)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--precision", default="fast")
    args = parser.parse_args()
    context = args.length + 8
    engines = [
        Engine(f, threads=1, max_context=context, precision=args.precision) for f in args.folders
    ]
    vocab = min(e.info.vocab_size for e in engines)
    ids = [int(t) for t in np.random.default_rng(0).integers(100, min(vocab, 30000), args.length)]
    cpu: list[list[float]] = [[] for _ in engines]
    wall: list[list[float]] = [[] for _ in engines]
    for e in engines:  # warm-up: ONNX Runtime's first run of a shape
        e.loop().reset()
        e.loop().forward(ids)
    for _ in range(args.repeats):
        for i, e in enumerate(engines):
            loop = e.loop()
            loop.reset()
            c0, w0 = time.thread_time(), time.perf_counter()
            loop.forward(ids)
            cpu[i].append(time.thread_time() - c0)
            wall[i].append(time.perf_counter() - w0)
    print(f"prompt of {args.length} tokens, {args.precision}, 1 thread, load {os.getloadavg()}")
    for folder, e, c, w in zip(args.folders, engines, cpu, wall, strict=True):
        print(
            f"  {folder} ({e.info.onnx_path.name}): CPU median {statistics.median(c):.3f} s "
            f"(runs {min(c):.3f}-{max(c):.3f}), wall median {statistics.median(w):.3f} s"
        )
    ratios = [b / a for a, b in zip(cpu[0], cpu[1], strict=True)]
    print(
        f"  second / first, CPU: median {statistics.median(ratios):.3f}x "
        f"(runs {min(ratios):.3f}-{max(ratios):.3f})"
    )


if __name__ == "__main__":
    main()
