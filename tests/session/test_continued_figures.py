"""The figures of an answer that Continue went on with say what they measured: the whole
answer's speed, perplexity and tokens, the answer's own time to first token, and the
continuation's share, time and writer, shown as such (session/continued.py)."""

from __future__ import annotations

import math

from chatapp.engine.figures import AnswerFigures
from chatapp.session.continued import continued_figures
from chatapp.session.formatting import figures_line
from chatapp.store.transcript import figures_line as markdown_line

FIRST = AnswerFigures(
    model="SmolLM2",
    mode="iobinding",
    device="cpu",
    tokens_per_s=50.0,  # 99 steps in 1.98 s
    ttft_s=0.200,
    perplexity=2.0,
    prompt_tokens=30,
    reused_tokens=0,
    generated_tokens=100,
    finish_reason="length",
)
MORE = AnswerFigures(
    model="SmolLM2",
    mode="iobinding",
    device="cpu",
    tokens_per_s=25.0,  # 49 steps in 1.96 s
    ttft_s=0.080,
    perplexity=4.0,
    prompt_tokens=131,  # the question and the first part, re-read
    reused_tokens=129,
    generated_tokens=50,
    finish_reason="eos",
)


def test_the_whole_answer_s_figures_cover_both_parts() -> None:
    whole = continued_figures(FIRST, MORE)
    assert whole is not None
    assert whole.generated_tokens == 150 and whole.continued_tokens == 50
    # Speed over every decode step of both parts, not the continuation's 25 tok/s.
    assert whole.tokens_per_s is not None
    assert math.isclose(whole.tokens_per_s, (99 + 49) / (99 / 50.0 + 49 / 25.0))
    # The answer's request -> first token stays; the continuation's is its own figure.
    assert whole.ttft_s == FIRST.ttft_s and whole.continued_ttft_s == MORE.ttft_s
    expected = math.exp((100 * math.log(2.0) + 50 * math.log(4.0)) / 150)
    assert whole.perplexity is not None and math.isclose(whole.perplexity, expected)
    # The prompt is the question's; prompt + generated is what the cache holds at the end.
    assert whole.prompt_tokens == 31 and whole.tokens_read == MORE.tokens_read
    assert whole.finish_reason == "eos" and whole.continued_by is None


def test_the_footer_says_the_answer_was_continued_and_how() -> None:
    whole = continued_figures(FIRST, MORE)
    assert whole is not None
    line = figures_line(whole)
    assert "TTFT 200 ms" in line and "150 tokens" in line
    assert f"{whole.tokens_per_s:.1f} tok/s" in line
    assert line.endswith("continued: +50 tokens, TTFT 80 ms")
    assert "continued: +50 tokens, TTFT 80 ms" in markdown_line(whole)
    # An answer written in one run says nothing of the kind.
    assert "continued" not in figures_line(FIRST)


def test_continuing_twice_adds_up_and_another_writer_is_named() -> None:
    once = continued_figures(FIRST, MORE)
    other = AnswerFigures(
        model="Gemma", mode="naive", device="cpu", tokens_per_s=10.0, ttft_s=0.5,
        perplexity=3.0, prompt_tokens=200, generated_tokens=10, finish_reason="length",
    )  # fmt: skip
    twice = continued_figures(once, other)
    assert twice is not None
    assert twice.generated_tokens == 160 and twice.continued_tokens == 60
    assert twice.continued_by == "Gemma · Naive · CPU"
    assert "continued by Gemma · Naive · CPU: +60 tokens, TTFT 500 ms" in figures_line(twice)
    assert twice.model == "SmolLM2"  # the answer is still the first writer's


def test_an_unknown_speed_is_not_made_up() -> None:
    blind = AnswerFigures(generated_tokens=20, finish_reason="eos")  # e.g. restored, no speed
    whole = continued_figures(FIRST, blind)
    assert whole is not None and whole.tokens_per_s is None and whole.perplexity is None
    assert continued_figures(None, MORE) is MORE  # nothing known of the first part
