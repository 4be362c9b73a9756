"""Time to first token over a long chat in the window's way: fit to the context, then answer.

Every turn asks a new question (sentences of the benchmark text), fits the conversation to
the context with the window's policy (session/context.py: fit_messages) and answers it with
the engine's chat, whose loop reuses the cached prefix. A turn whose prompt could not reuse
at least half of its tokens counts as a full re-read. Compare the policies:

    .venv/bin/python scripts/long_chat_ttft.py --turns 200                  # low-water cut
    .venv/bin/python scripts/long_chat_ttft.py --turns 200 --policy minimal # smallest cut
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from chatapp.convert.default_model import default_model_dir
from chatapp.engine.bench.run import filler_text
from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message
from chatapp.session.context import LOW_WATER_SHARE, counter_for, fit_messages


def questions() -> list[str]:
    text = re.sub(r"[#*`>|\-]", " ", filler_text())
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 6]
    return [" ".join(s.split()[:30]) for s in sentences]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the default model")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--context", type=int, default=None, help="default: the engine's")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--policy", choices=["low-water", "minimal"], default="low-water")
    parser.add_argument("--json", type=Path, default=None, help="also write every turn here")
    args = parser.parse_args()
    engine = Engine(
        args.model or default_model_dir(), threads=args.threads, max_context=args.context
    )
    settings = replace(GREEDY, max_new_tokens=args.max_new_tokens)
    low_water = LOW_WATER_SHARE if args.policy == "low-water" else None
    asked = questions()
    count = counter_for(engine)
    messages = [Message("system", "You are a helpful assistant. Answer in one short sentence.")]
    turns = []
    started = time.perf_counter()
    for i in range(args.turns):
        messages.append(Message("user", f"{asked[i % len(asked)]} What does this mean?"))
        kept, report = fit_messages(
            i, messages, count, engine.max_context, args.max_new_tokens, low_water
        )
        gen = engine.chat(kept, settings)
        stats = gen.run()
        messages.append(Message("assistant", gen.text))
        reread = i > 0 and stats.reused_tokens < stats.prompt_tokens / 2
        turns.append(
            {
                "turn": i + 1,
                "ttft_s": stats.ttft_s,
                "prompt_tokens": stats.prompt_tokens,
                "reused_tokens": stats.reused_tokens,
                "dropped_messages": report.dropped,
                "full_reread": reread,
            }
        )
        print(
            f"turn {i + 1:3d}: TTFT {stats.ttft_s * 1000:7.0f} ms, prompt {stats.prompt_tokens:5d}"
            f" (reused {stats.reused_tokens:5d}), dropped {report.dropped:3d} messages"
            + ("  FULL RE-READ" if reread else ""),
            flush=True,
        )
    ttfts = [t["ttft_s"] for t in turns]
    rereads = [t["turn"] for t in turns if t["full_reread"]]
    print(
        f"\n{args.policy} policy, {args.turns} turns, context {engine.max_context}, "
        f"{args.max_new_tokens} new tokens at most, {time.perf_counter() - started:.0f} s in all"
    )
    print(
        f"TTFT median {statistics.median(ttfts) * 1000:.0f} ms, "
        f"p95 {float(np.percentile(ttfts, 95)) * 1000:.0f} ms, max {max(ttfts) * 1000:.0f} ms; "
        f"full re-reads: {len(rereads)} (turns {rereads})"
    )
    print("load average:", Path("/proc/loadavg").read_text().strip())
    if args.json:
        args.json.write_text(json.dumps(turns, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
