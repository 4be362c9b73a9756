"""Conversation and figure formatting: plain data, no Qt needed."""

from __future__ import annotations

import math

from chatapp.engine.figures import AnswerFigures
from chatapp.engine.metrics import RunStats, StepTiming
from chatapp.session import formatting as fmt
from chatapp.session.conversation import Conversation


def _stats() -> RunStats:
    stats = RunStats(mode="naive", device="cpu", prompt_tokens=10, context_length=512)
    stats.token_ids = [5, 6, 7]
    stats.logprobs = [-0.1, -0.2, -0.3]
    stats.latencies_s = [0.02, 0.02]
    stats.ttft_s = 0.25
    stats.steps = [StepTiming(0.001, 0.018, 0.001)] * 2
    stats.finish_reason = "stop"
    return stats


def test_figures_from_stats_and_line() -> None:
    fig = AnswerFigures.from_stats(_stats())
    assert fig.tokens_per_s == 50.0
    assert fig.tokens_in_context == 13
    assert math.isclose(fig.perplexity, math.exp(0.2))
    line = fmt.figures_line(fig)
    assert line.startswith("Naive · CPU · 50.0 tok/s · TTFT 250 ms · perplexity 1.22")
    assert line.endswith("stopped")
    assert fig.to_dict()["prompt_perplexity"] is None  # NaN is not JSON


def test_value_formats_are_bare_numbers() -> None:
    assert float(fmt.rate(41.26)) == 41.3
    assert fmt.rate(0.0) == fmt.MISSING
    assert fmt.millis(0.1234) == "123"
    assert fmt.perplexity(float("nan")) == fmt.MISSING
    assert fmt.context_usage(12, 512) == "12 / 512"


def test_conversation_turns_regenerate_and_failed_prompt() -> None:
    conv = Conversation()
    assert conv.title == "New chat"
    conv.add_user("Hello\nsecond line")
    assert conv.can_regenerate()  # a question without an answer (e.g. restored after a crash)
    conv.add_answer("Hi!", AnswerFigures.from_stats(_stats()))
    assert conv.title == "Hello"
    assert conv.can_regenerate()
    messages = conv.engine_messages("  Be brief. ")
    assert [(m.role, m.content) for m in messages] == [
        ("system", "Be brief."),
        ("user", "Hello\nsecond line"),
        ("assistant", "Hi!"),
    ]
    assert conv.engine_messages("")[0].role == "user"
    conv.drop_last_answer()
    assert conv.pop_pending_user() == "Hello\nsecond line"
    assert conv.messages == []
