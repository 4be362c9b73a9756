"""Resident memory over a long conversation, without the window: where it grows, and why.

A Chat (session/chat.py) on InlineRunners answers N questions with a model
(default: the prepared default model), either in one growing conversation or in a new chat
each time (`--new-chat`). Every 10 questions it prints the resident memory, the Python heap
(tracemalloc) and the tokens the KV cache holds, and at the end the growth per question and
per 1000 cached tokens against the KV cache's bytes per token. Linux only (/proc).

Measured (issue 37, the default model, 16 new tokens per answer, 2 busy cores): one growing
conversation 278 -> 295 MB from 10 to 20 questions (1.7 MB a question; 42.9 MB per 1000 more
cached tokens against the KV cache's 43.9 MB), the Python heap flat at 3.6 MB; a new chat each
time flat at 260 MB over 30 questions. The growth is the KV cache's pages being touched as the
cached conversation lengthens (45 KB a token for the default model, up to the context cap the
load's memory check counted), not something kept per answer.

    PYTHONPATH=$PWD .venv/bin/python scripts/long_chat_memory.py --questions 30
"""

from __future__ import annotations

import argparse
import gc
import os
import tracemalloc
from pathlib import Path

from chatapp.convert.default_model import default_model_dir
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.session.chat import GenerationOptions, State, chat_on
from chatapp.session.model_jobs import EngineHost
from chatapp.session.running import InlineRunner


def resident_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--new-chat", action="store_true", help="a new chat for each question")
    args = parser.parse_args()
    runner = InlineRunner()
    chat = chat_on(runner, EngineHost(), InlineRunner())
    assert chat.backend_session.open_model(args.model or default_model_dir(), threads=2)
    runner.drain()
    assert chat.state is State.READY and chat.backend_session.host.engine is not None, chat.state
    engine = chat.backend_session.host.engine
    per_token = engine.info.kv_bytes_per_token()
    settings = SamplingSettings(temperature=0.7, max_new_tokens=args.new_tokens, seed=1)
    options = GenerationOptions(settings, Mode.IOBINDING)
    tracemalloc.start()
    chat.send("Hello, tell me a story.", options)
    runner.drain()
    first_mb, first_tokens = resident_mb(), len(engine.loop().cached)
    for i in range(args.questions):
        if args.new_chat:
            chat.new_chat()
        chat.send(f"Question {i}: tell me more about number {i}.", options)
        runner.drain()
        if (i + 1) % 10 == 0:
            gc.collect()
            heap = tracemalloc.get_traced_memory()[0] / 2**20
            print(
                f"{i + 1:4d} questions: resident {resident_mb():.0f} MB, Python heap "
                f"{heap:.1f} MB, KV cache holds {len(engine.loop().cached)} tokens",
                flush=True,
            )
    grown = resident_mb() - first_mb
    tokens = len(engine.loop().cached) - first_tokens
    print(f"growth: {grown / args.questions:.2f} MB a question", end="")
    if tokens > 0:
        print(
            f", {grown / tokens * 1000:.1f} MB per 1000 more cached tokens "
            f"(the KV cache: {per_token * 1000 / 2**20:.1f} MB)"
        )
    else:
        print()


if __name__ == "__main__":
    main()
