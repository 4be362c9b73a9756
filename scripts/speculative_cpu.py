"""`chatapp bench --speculative` in one thread's CPU time: plain against speculative decoding
on the bench's prompts (chatapp/resources/speculative_prompts.json), greedy, interleaved.

On a shared, busy machine wall-clock tokens/s mostly measure the other processes; the CPU time
one single-threaded session spends per decoded token (time.thread_time: onnxruntime runs a
one-thread session on the calling thread) is what plain and speculative decoding themselves
cost. It is not the two-thread wall clock the issue's goal is stated in: where a pass is bound
by reading the weights, wall clock favours a pass of several rows more than CPU time does.
Each repeat answers every prompt both ways (who leads alternating), from an empty KV cache;
the first token (the prompt's) is left out; the ratio is the median of the per-repeat ratios
of CPU time per token, plain over speculative. Both answers must be the same tokens.

    .venv/bin/python scripts/speculative_cpu.py [--model FOLDER] [--repeats 3] [--max-new-tokens 96]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine
    from chatapp.engine.sampling import SamplingSettings


def decode_cpu(
    engine: Engine, ids: list[int], settings: SamplingSettings, drafts: bool
) -> tuple[float, list[int], int]:
    """CPU seconds per token after the first, the tokens, and the passes after the first."""
    engine.speculative = drafts
    engine.reset()
    generation = engine.generate_ids(ids, settings)
    started = None
    for _ in generation:
        if started is None:
            started = time.thread_time()
    stats = generation.stats
    assert started is not None
    spent = time.thread_time() - started
    return spent / max(1, stats.generated_tokens - 1), stats.token_ids, stats.runs


def main() -> None:
    from chatapp.convert.default_model import default_model_dir
    from chatapp.engine.bench.speculative import bench_prompts, prompt_ids
    from chatapp.engine.engine import Engine
    from chatapp.engine.sampling import SamplingSettings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    args = parser.parse_args()
    engine = Engine(args.model or default_model_dir(), threads=1, precision="fast")
    refusal = engine.speculation_refusal()
    if refusal:
        sys.exit(f"Speculative decoding does not run on {engine.info.name}: {refusal}.")
    settings = SamplingSettings(
        temperature=0.0, repetition_penalty=1.0, max_new_tokens=args.max_new_tokens
    )
    prompts = bench_prompts()
    encoded = [prompt_ids(engine, p) for p in prompts]
    load = os.getloadavg()
    decode_cpu(engine, encoded[0], settings, True)  # the planner times its passes once
    ratios: list[list[float]] = [[] for _ in prompts]
    cpu: dict[tuple[int, bool], list[float]] = {}
    runs, same = [0] * len(prompts), [True] * len(prompts)
    tokens = [0] * len(prompts)
    for repeat in range(args.repeats):
        for i, ids in enumerate(encoded):
            got = {}
            for drafts in (False, True) if repeat % 2 == 0 else (True, False):
                got[drafts] = decode_cpu(engine, ids, settings, drafts)
                cpu.setdefault((i, drafts), []).append(got[drafts][0])
            ratios[i].append(got[False][0] / got[True][0])
            same[i] &= got[False][1] == got[True][1]
            runs[i], tokens[i] = got[True][2], len(got[True][1])
    print(
        f"{engine.info.name}, greedy, one thread's CPU time per decoded token, "
        f"{args.repeats} interleaved repeats; load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"before, {os.getloadavg()[0]:.1f} after"
    )
    print(f"{'prompt':40} {'kind':8} {'plain':>8} {'spec.':>8} {'ratio':>6} {'tok/run':>7} same")
    by_kind: dict[str, list[float]] = {}
    for i, prompt in enumerate(prompts):
        ratio = statistics.median(ratios[i])
        by_kind.setdefault(prompt.kind, []).append(ratio)
        per_run = (tokens[i] - 1) / runs[i] if runs[i] else 0.0
        print(
            f"{prompt.name[:40]:40} {prompt.kind:8} "
            f"{statistics.median(cpu[i, False]) * 1000:6.2f}ms "
            f"{statistics.median(cpu[i, True]) * 1000:6.2f}ms {ratio:5.2f}x {per_run:7.2f} "
            f"{'yes' if same[i] else 'NO'}"
        )
    for kind, values in by_kind.items():
        print(f"{kind}: {statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}x)")


if __name__ == "__main__":
    main()
