"""Aggregate decode speed of one sequence against N decoded together (engine/slots.py).

    PYTHONPATH=. .venv/bin/python scripts/batch_decode.py [--model DIR] [--slots 4]
        [--new-tokens 48] [--repeats 2] [--threads T]

Per repeat, in one process on one engine: one sequence on the engine's own IO-Binding loop
(what a single client gets), then `--slots` sequences at once, each on its own thread through
a slot (all join at the start; their prompts are prefilled one after another, then they decode
together). Every sequence generates exactly --new-tokens (ignore_eos). Printed per run: wall
time, aggregate generated tokens/s (prefill included), decode-only tokens/s (from the last
prompt's first token to the end), and the process's CPU time (user + sys) per generated token,
which a busy machine disturbs less than wall time; the time to first token of a sequence that
joins while the others decode, against its own alone; the load average before and after. The
batched sequences' tokens are checked against their solo runs (greedy). A shaped random-weight
model (scripts/shaped_gguf.py, converted with `chatapp convert`) works as --model too.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chatapp.convert.default_model import default_model_dir  # noqa: E402
from chatapp.engine.engine import Engine  # noqa: E402
from chatapp.engine.sampling import SamplingSettings  # noqa: E402

PROMPTS = [
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Write a short poem about the autumn rain falling on the city streets at night.",
    "Explain in simple words why the sky is blue during the day and red at sunset.",
    "List five things to pack for a weekend hiking trip in the mountains, and why.",
]


@dataclass
class Run:
    wall_s: float
    decode_s: float  # from the moment every sequence had its first token
    cpu_s: float
    tokens: int
    decode_tokens: int


def cpu_now() -> float:
    t = os.times()
    return t.user + t.system


def solo(engine: Engine, prompt: list[int], settings: SamplingSettings) -> tuple[Run, list[int]]:
    engine.reset()
    c0, t0 = cpu_now(), time.perf_counter()
    first = 0.0
    tokens: list[int] = []
    for event in engine.generate_ids(prompt, settings, ignore_eos=True):
        if event.index == 0:
            first = time.perf_counter()
        tokens.append(event.token_id)
    t1 = time.perf_counter()
    n = len(tokens)
    return Run(t1 - t0, t1 - first, cpu_now() - c0, n, n - 1), tokens


def together(
    engine: Engine, prompts: list[list[int]], settings: SamplingSettings
) -> tuple[Run, list[list[int]]]:
    batch = engine.slots(len(prompts))
    for loop in batch.loops:  # every sequence prefills its whole prompt, as solo does
        loop.reset()
    results: list[list[int]] = [[] for _ in prompts]
    firsts: list[float] = [0.0] * len(prompts)

    def client(i: int) -> None:
        loop = batch.acquire(prompts[i])
        assert loop is not None
        try:
            for event in engine.generate_ids(prompts[i], settings, ignore_eos=True, loop=loop):
                if event.index == 0:
                    firsts[i] = time.perf_counter()
                results[i].append(event.token_id)
        finally:
            batch.release(loop)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    c0, t0 = cpu_now(), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = time.perf_counter()
    n = sum(len(r) for r in results)
    return Run(t1 - t0, t1 - max(firsts), cpu_now() - c0, n, n - len(prompts)), results


def join_ttft(engine: Engine, prompts: list[list[int]], settings: SamplingSettings) -> float:
    """The last prompt's time to first token when it arrives while the others decode (the
    first has 8 tokens): its prefill waits for the step under way, then runs alone."""
    batch = engine.slots(len(prompts))
    for loop in batch.loops:
        loop.reset()
    others = len(prompts) - 1
    # Set, never waited for by a decoding sequence: one that stopped pulling tokens would hold
    # every step (engine/slots.py).
    under_way = threading.Event()
    ttft: list[float] = []

    def client(i: int) -> None:
        if i == others:
            under_way.wait()
        loop = batch.acquire(prompts[i])
        assert loop is not None
        try:
            gen = engine.generate_ids(prompts[i], settings, ignore_eos=True, loop=loop)
            for event in gen:
                if i == 0 and event.index == 7:
                    under_way.set()
            if i == others:
                ttft.append(gen.stats.ttft_s)
        finally:
            batch.release(loop)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ttft[0]


def line(label: str, run: Run) -> str:
    return (
        f"{label:<22} wall {run.wall_s:7.2f} s  {run.tokens / run.wall_s:6.2f} tok/s  "
        f"decode {run.decode_tokens / run.decode_s:6.2f} tok/s  "
        f"CPU {1000 * run.cpu_s / run.tokens:7.1f} ms/token"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", type=Path, default=None, help="model folder (default model)")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--context", type=int, default=512, help="KV context per sequence")
    args = ap.parse_args()
    engine = Engine(
        args.model or default_model_dir(), threads=args.threads, max_context=args.context
    )
    texts = (PROMPTS * args.slots)[: args.slots]
    prompts = [list(engine.tokenizer.tok.encode(t)) for t in texts]
    settings = SamplingSettings(
        temperature=0.0, repetition_penalty=1.0, max_new_tokens=args.new_tokens
    )
    print(
        f"{engine.info.name} ({engine.info.onnx_path.name}), threads {args.threads or 'default'},"
        f" {args.new_tokens} new tokens a sequence, prompts {[len(p) for p in prompts]} tokens"
    )
    print(f"load average before: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ratios, cpu_ratios = [], []
    for r in range(args.repeats):
        one, reference = solo(engine, prompts[0], settings)
        many, answers = together(engine, prompts, settings)
        assert answers[0] == reference, "a batched sequence's tokens differ from its solo run's"
        print(line(f"[{r + 1}] 1 sequence", one))
        print(line(f"[{r + 1}] {args.slots} together", many))
        ratios.append((many.tokens / many.wall_s) / (one.tokens / one.wall_s))
        cpu_ratios.append((one.cpu_s / one.tokens) / (many.cpu_s / many.tokens))
        engine.reset()
        alone = engine.generate_ids(prompts[-1], settings, ignore_eos=True).run().ttft_s
        joining = join_ttft(engine, prompts, settings)
        print(
            f"    TTFT of a sequence joining {args.slots - 1} decoding ones: "
            f"{joining * 1000:.0f} ms, alone {alone * 1000:.0f} ms ({joining / alone:.2f}x)"
        )
        print(f"    load average: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"aggregate tok/s, {args.slots} together / 1: "
        + ", ".join(f"{x:.2f}x" for x in ratios)
        + "; CPU time per token, 1 / together: "
        + ", ".join(f"{x:.2f}x" for x in cpu_ratios)
    )


if __name__ == "__main__":
    main()
