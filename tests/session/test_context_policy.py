"""Dropping the oldest turns so the prompt plus the answer's reserve fits the context."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest

from chatapp.engine.text.chat import Message
from chatapp.session.context import fit_to_context, split_turns

GENERATION_PROMPT = 3  # "<|assistant|>\n" of a template, counted once per prompt
PER_MESSAGE = 4  # role markers and newlines around each message


def count(messages: list[Message]) -> int:
    """A stand-in for len(chat_ids(messages)): one token per word plus template overhead."""
    return GENERATION_PROMPT + sum(PER_MESSAGE + len(m.content.split()) for m in messages)


def conversation(turns: int, words: int = 10, system: str | None = "be kind") -> list[Message]:
    out = [Message("system", system)] if system is not None else []
    for i in range(turns):
        out.append(Message("user", f"q{i} " + "w " * (words - 1)))
        out.append(Message("assistant", f"a{i} " + "w " * (words - 1)))
    return out


def test_everything_fits() -> None:
    msgs = conversation(3)
    fit = fit_to_context(msgs, count, limit=1000, reserve=100)
    assert fit.kept == msgs
    assert (fit.dropped_count, fit.dropped_turns, fit.cut_index) == (0, 0, None)
    assert fit.fits
    assert fit.prompt_tokens == count(msgs)
    assert fit.pinned_count == 1
    assert fit.pinned_tokens == count(msgs[:1])
    # Each turn: two messages of 10 words plus their markers.
    assert [t.tokens for t in fit.turns] == [2 * (PER_MESSAGE + 10)] * 3
    assert [(t.start, t.stop) for t in fit.turns] == [(1, 3), (3, 5), (5, 7)]
    assert fit.pinned_tokens + sum(t.tokens for t in fit.turns) == fit.prompt_tokens


def test_oldest_turns_go_first_and_the_system_prompt_stays() -> None:
    msgs = [*conversation(10), Message("user", "the question now")]
    limit, reserve = 150, 40
    fit = fit_to_context(msgs, count, limit=limit, reserve=reserve)
    assert fit.dropped_turns > 0
    assert fit.fits and fit.prompt_tokens + reserve <= limit
    assert fit.kept[0] == msgs[0]  # the system prompt
    assert fit.kept[1].role == "user"  # never an answer without its question
    assert fit.kept[-1] == msgs[-1]
    assert fit.kept[1:] == msgs[1 + fit.dropped_count :]  # a clean cut, nothing skipped
    assert fit.dropped_count % 2 == 0 and fit.dropped_turns == fit.dropped_count // 2
    assert fit.cut_index == 1 + fit.dropped_count
    assert [t.kept for t in fit.turns] == [False] * fit.dropped_turns + [True] * (
        len(fit.turns) - fit.dropped_turns
    )
    # As little as possible is dropped: one more turn would not have fit.
    one_more = msgs[:1] + msgs[1 + fit.dropped_count - 2 :]
    assert count(one_more) + reserve > limit


def test_cut_is_minimal_for_every_limit() -> None:
    msgs = conversation(12, words=7)
    for limit in range(60, 400, 7):
        fit = fit_to_context(msgs, count, limit=limit, reserve=20)
        expected_drop = 0
        while expected_drop < 11 and count(msgs[:1] + msgs[1 + 2 * expected_drop :]) + 20 > limit:
            expected_drop += 1
        assert fit.dropped_turns == expected_drop, limit


def test_when_even_the_last_turn_is_too_long() -> None:
    msgs = [*conversation(2), Message("user", "word " * 500)]
    fit = fit_to_context(msgs, count, limit=256, reserve=64)
    assert not fit.fits
    assert fit.kept == [msgs[0], msgs[-1]]
    assert fit.dropped_turns == 2
    assert fit.prompt_tokens == count(fit.kept) > fit.budget == 192


def test_no_system_prompt_and_a_greeting_first() -> None:
    msgs = [Message("assistant", "Hello! How can I help?"), *conversation(4, system=None)]
    assert split_turns(msgs) == [(0, 1), (1, 3), (3, 5), (5, 7), (7, 9)]
    fit = fit_to_context(msgs, count, limit=75, reserve=10)
    assert fit.pinned_count == 0 and fit.pinned_tokens == 0
    assert fit.kept[0].role == "user"
    assert fit.kept == msgs[fit.dropped_count :]
    assert fit.fits


def test_count_tokens_is_called_sparingly() -> None:
    calls = 0

    def counting(messages: list[Message]) -> int:
        nonlocal calls
        calls += 1
        return count(messages)

    fit = fit_to_context(conversation(64), counting, limit=400, reserve=50)
    assert fit.dropped_turns > 0
    assert calls <= 2 * 64 + 7 + 2  # per-turn and per-message figures + a binary search


def test_any_object_with_role_and_content() -> None:
    @dataclass
    class GuiMessage:
        role: str
        content: str
        figures: object = None

    msgs = [GuiMessage("user", "a b c"), GuiMessage("assistant", "d e")]
    fit = fit_to_context(msgs, lambda ms: sum(len(m.content.split()) for m in ms), 100)
    assert fit.kept == msgs and fit.kept[0] is msgs[0]


def test_empty_and_invalid() -> None:
    fit = fit_to_context([], count, limit=10)
    assert fit.kept == [] and fit.prompt_tokens == 0 and fit.turns == ()
    with pytest.raises(ValueError):
        fit_to_context([], count, limit=0)
    with pytest.raises(ValueError):
        fit_to_context([], count, limit=10, reserve=-1)


def test_template_overhead_without_a_system_prompt_is_counted_once() -> None:
    """A template that adds text to every prompt (a default system prompt, the generation
    prompt) with no system message of ours: each turn's figure leaves that shared part out."""
    default_system = 20

    def templated(messages: list[Message]) -> int:
        return default_system + count(messages)

    msgs = conversation(3, system=None)
    fit = fit_to_context(msgs, templated, limit=1000)
    assert fit.pinned_count == 0 and fit.pinned_tokens == 0
    assert fit.overhead_tokens == default_system + GENERATION_PROMPT
    assert [t.tokens for t in fit.turns] == [2 * (PER_MESSAGE + 10)] * 3
    assert fit.overhead_tokens + sum(t.tokens for t in fit.turns) == fit.prompt_tokens
    with_system = fit_to_context(conversation(3), count, limit=1000)
    assert with_system.overhead_tokens == with_system.pinned_tokens
    # The same with one turn: a turn's figure never depends on the turns around it.
    for turns in range(1, 4):
        grown = fit_to_context(msgs[: 2 * turns], templated, limit=1000)
        assert grown.overhead_tokens == default_system + GENERATION_PROMPT
        assert grown.turns[0].tokens == 2 * (PER_MESSAGE + 10)
        assert grown.turns[0].message_tokens == (PER_MESSAGE + 10, PER_MESSAGE + 10)
    question = fit_to_context(msgs[:1], templated, limit=1000)  # not answered yet
    assert question.turns[0].message_tokens == (PER_MESSAGE + 10,)


def test_a_template_that_refuses_the_probe_counts_its_shared_part_in_every_turn() -> None:
    def strict(messages: list[Message]) -> int:
        if any(m.content == "Hello" for m in messages):
            raise ValueError("the template wants something else")
        return 20 + count(messages)

    msgs = conversation(2, system=None)
    fit = fit_to_context(msgs, strict, limit=1000)
    assert fit.overhead_tokens == 0
    assert [t.tokens for t in fit.turns] == [20 + count(msgs[:2])] * 2


def test_whole_prompts_are_counted_only_about_twice() -> None:
    """The per-turn figures say where to cut; exact counts only confirm it."""
    whole: list[int] = []

    def counting(messages: list[Message]) -> int:
        if len(messages) > 3:
            whole.append(len(messages))
        return count(messages)

    msgs = conversation(200)
    fit = fit_to_context(msgs, counting, limit=900, reserve=100)
    assert fit.dropped_turns > 100 and fit.fits
    assert len(whole) <= 3
    one_more = msgs[:1] + msgs[1 + fit.dropped_count - 2 :]
    assert count(one_more) + 100 > 900  # still minimal


def test_a_misleading_estimate_still_gives_the_minimal_cut() -> None:
    """A template whose whole prompt costs more than its turns suggest (it adds a token per
    message pair, say): the exact counts correct the estimate, by steps or by bisection."""

    def lumpy(messages: list[Message]) -> int:
        return count(messages) + 9 * (len(messages) // 2) ** 2 // 10

    msgs = conversation(40, words=5)
    for limit in range(80, 1400, 37):
        fit = fit_to_context(msgs, lumpy, limit=limit, reserve=10)
        expected = 0
        while expected < 39 and lumpy(msgs[:1] + msgs[1 + 2 * expected :]) + 10 > limit:
            expected += 1
        assert fit.dropped_turns == expected, limit


def grow_chat(turns: int, limit: int, low_water: float | None) -> list[int]:
    """Ask `turns` questions one after the other (each answered); the number of messages
    dropped before each question is sent."""
    msgs: list[Message] = [Message("system", "be kind")]
    drops = []
    for i in range(turns):
        msgs.append(Message("user", f"q{i} " + "w " * 9))
        fit = fit_to_context(msgs, count, limit=limit, reserve=20, low_water=low_water)
        assert fit.fits
        drops.append(fit.dropped_count)
        msgs.append(Message("assistant", f"a{i} " + "w " * 9))
    return drops


def test_low_water_cuts_deep_and_then_keeps_the_cut() -> None:
    limit = 400  # budget 380: a turn is 28 tokens, so about 13 turns fit
    drops = grow_chat(60, limit, low_water=0.5)
    cuts = [i for i in range(1, len(drops)) if drops[i] != drops[i - 1]]
    # Between cuts the prompt only grows at its end: the cached prefix stays valid.
    assert 3 <= len(cuts) <= 8
    assert min(b - a for a, b in itertools.pairwise(cuts)) >= 5
    # Right after each cut: at most half the budget, plus the newest turns.
    msgs: list[Message] = [Message("system", "be kind")]
    for i in range(60):
        msgs.append(Message("user", f"q{i} " + "w " * 9))
        if i in cuts:
            fit = fit_to_context(msgs, count, limit=limit, reserve=20, low_water=0.5)
            # (the cut is decided by the turns before the one that overflowed)
            newest = fit.turns[-1].tokens + fit.turns[-2].tokens
            assert fit.prompt_tokens <= 0.5 * fit.budget + newest
        msgs.append(Message("assistant", f"a{i} " + "w " * 9))


def test_without_low_water_every_answer_after_the_first_cut_moves_it() -> None:
    drops = grow_chat(60, 400, low_water=None)
    first = next(i for i, d in enumerate(drops) if d)
    assert all(drops[i] != drops[i - 1] for i in range(first + 1, len(drops)))


@pytest.mark.parametrize("answer_words", [10, 40, 120])
def test_an_answer_never_moves_the_cut_it_was_asked_under(answer_words: int) -> None:
    """A cut made when the question alone is counted stays when its answer is counted too
    (the 200-turn chat re-read twice in a row before: turns 173 and 174)."""
    msgs: list[Message] = [Message("system", "be kind")]
    drops = []
    for i in range(120):
        msgs.append(Message("user", f"q{i} " + "w " * 9))
        fit = fit_to_context(msgs, count, limit=1000, reserve=20, low_water=0.5)
        drops.append(fit.dropped_count)
        msgs.append(Message("assistant", f"a{i} " + "w " * (answer_words - 1)))
    cuts = [i for i in range(1, len(drops)) if drops[i] != drops[i - 1]]
    assert len(cuts) >= 2
    assert all(b - a > 1 for a, b in itertools.pairwise(cuts)), cuts


def test_the_replayed_cut_is_the_same_on_every_call() -> None:
    msgs = conversation(40)
    msgs.append(Message("user", "now " + "w " * 9))
    first = fit_to_context(msgs, count, limit=400, reserve=20, low_water=0.5)
    again = fit_to_context(list(msgs), count, limit=400, reserve=20, low_water=0.5)
    assert first.dropped_count == again.dropped_count > 0
    # Never fewer dropped than the smallest cut that fits.
    minimal = fit_to_context(msgs, count, limit=400, reserve=20)
    assert first.dropped_count >= minimal.dropped_count


@pytest.mark.parametrize("low_water", [0.0, -0.5, 1.5])
def test_low_water_must_be_a_share(low_water: float) -> None:
    with pytest.raises(ValueError, match="low_water"):
        fit_to_context(conversation(2), count, limit=100, low_water=low_water)


def test_a_newest_turn_too_long_is_still_sent_alone() -> None:
    msgs = [*conversation(3), Message("user", "w " * 500)]
    fit = fit_to_context(msgs, count, limit=400, reserve=20, low_water=0.5)
    assert not fit.fits
    assert fit.kept == [msgs[0], msgs[-1]]
