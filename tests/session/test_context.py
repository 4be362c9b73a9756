"""The per-turn and per-message token figures the transcript shows, on real tokenizers: a
message's figure depends on that message only, never on the turns around it."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from chatapp.engine.text.chat import ChatTokenizer, Message
from chatapp.session.context import LOW_WATER_SHARE, POLICY_TEXT, fit_messages

QUESTION = Message("user", "What is the capital of France?")
ANSWER = Message("assistant", "The capital of France is Paris. It is a beautiful city.")
GROWING = [
    [QUESTION],
    [QUESTION, ANSWER],
    [QUESTION, ANSWER, Message("user", "And of Germany?")],
    [QUESTION, ANSWER, Message("user", "And of Germany?"), Message("assistant", "Berlin.")],
]


def figures(folder: Path, system: str = "") -> list[tuple[int | None, int | None]]:
    """(question's tokens, answer's tokens) of the first turn as the chat grows."""
    tokenizer = ChatTokenizer.from_folder(folder)
    out = []
    for chat in GROWING:
        messages = ([Message("system", system)] if system else []) + chat
        _, report = fit_messages(1, messages, lambda ms: len(tokenizer.chat_ids(ms)), 2048, 64)
        assert report.prompt_tokens == len(tokenizer.chat_ids(messages))
        assert report.overhead_tokens + sum(t.tokens for t in report.turns) in range(
            report.prompt_tokens - 2, report.prompt_tokens + 3
        )
        for turn in report.turns:
            assert sum(turn.message_tokens) == turn.tokens
        out.append((report.message_tokens(0), report.message_tokens(1)))
    return out


def check_stable(found: list[tuple[int | None, int | None]]) -> None:
    question = {q for q, _ in found}
    answers = {a for _, a in found[1:]}
    assert len(question) == 1 and None not in question, found
    assert len(answers) == 1 and None not in answers, found
    assert found[0][1] is None  # not answered yet


def test_the_first_question_keeps_its_figure_on_the_tiny_model(tiny_model_dir: Path) -> None:
    check_stable(figures(tiny_model_dir))
    check_stable(figures(tiny_model_dir, system="Be brief."))


@pytest.mark.default_model
def test_the_first_question_keeps_its_figure_on_the_default_model(default_model_dir: Path) -> None:
    """SmolLM2's template adds a default system prompt when there is none: the figure of the
    README's question used to read 37, then 60, then 35 tokens as the chat grew."""
    found = figures(default_model_dir)
    check_stable(found)
    assert found[0][0] == 12  # "<|im_start|>user\n...<|im_end|>\n" around 7 words
    assert figures(default_model_dir, system="Be brief.")[1] == found[1]


def count(messages: list[Message]) -> int:
    return 3 + sum(4 + len(m.content.split()) for m in messages)


def test_a_cut_goes_down_to_the_low_water_mark_and_then_stays() -> None:
    msgs = [Message("system", "be kind")]
    dropped: list[int] = []
    for i in range(40):
        msgs.append(Message("user", f"q{i} " + "w " * 9))
        kept, report = fit_messages(i, msgs, count, limit=500, max_new_tokens=20)
        assert report.fits and count(kept) == report.prompt_tokens
        if dropped and report.dropped != dropped[-1]:
            # A new cut: the chat before the turn that overflowed down to the low-water mark.
            low = LOW_WATER_SHARE * (report.limit - report.reserve)
            newest = report.turns[-1].tokens + report.turns[-2].tokens
            assert report.prompt_tokens <= low + newest
        dropped.append(report.dropped)
        msgs.append(Message("assistant", "a " * 10))
    cuts = sum(b != a for a, b in itertools.pairwise(dropped))
    assert 1 <= cuts <= 4  # 40 turns of 28 tokens in a 480-token budget
    assert POLICY_TEXT in report.describe()
    assert f"{LOW_WATER_SHARE:.0%}" in POLICY_TEXT
