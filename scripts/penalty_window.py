"""How many sentences an answer repeats with the repetition penalty over the last N tokens or
over all of them: each prompt answered once per N (greedy with the folder's suggested sampling,
so the same tokens every run), the answer split into sentences, repeats counted.

    .venv/bin/python scripts/penalty_window.py FOLDER [--continue] [--last 64,256,-1]

--continue: text continuation (a base model's default in the window); else one-turn chats.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHAT = (
    "Write a story about a dragon.",
    "Explain how a bicycle works.",
    "List ten fruits and describe each.",
    "Write an email asking for a day off.",
)
CONTINUE = (
    "Write one sentence about the sea.",
    "The history of bread begins",
    "Once upon a time, a small robot",
    "Python is a programming language that",
)
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def repeated(text: str) -> tuple[int, int]:
    """(sentences seen before in the answer, sentences); fragments of 15 characters or fewer
    ("Sea Life", a list's numbers) are not counted."""
    sentences = [s.strip() for s in SENTENCE_END.split(text) if len(s.strip()) > 15]
    return len(sentences) - len(set(sentences)), len(sentences)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--continue", dest="cont", action="store_true")
    parser.add_argument("--last", default="64,256,-1", help="the penalty's last N tokens (-1: all)")
    parser.add_argument("--new", type=int, default=256, help="tokens per answer at most")
    args = parser.parse_args()

    from chatapp.engine.engine import Engine
    from chatapp.engine.text.chat import STYLE_CONTINUE, STYLE_TEMPLATE, Message

    engine = Engine(args.folder)
    style = STYLE_CONTINUE if args.cont else STYLE_TEMPLATE
    base = replace(engine.model.sampling.settings, max_new_tokens=args.new)
    print(f"{engine.info.name}: {engine.model.sampling.source}; {base}")
    for prompt in CONTINUE if args.cont else CHAT:
        row = []
        for last in (int(n) for n in args.last.split(",")):
            engine.reset()
            settings = replace(base, penalty_last_n=last)
            answer = engine.chat([Message("user", prompt)], settings, style=style)
            answer.run()
            seen, count = repeated(answer.text)
            stats = answer.stats
            row.append(
                f"last {last}: {seen}/{count} repeated, {stats.generated_tokens} "
                f"{stats.finish_reason}"
            )
        print(f"{prompt[:32]:32} | " + " | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
