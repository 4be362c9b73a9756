"""Which messages are drawn as Markdown, and how much of a long one the transcript holds."""

from __future__ import annotations

import pytest

from chatapp.gui.chat import render_policy as rp


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("x" * (rp.MARKDOWN_MAX_CHARS + 1), "longer than 16 000 characters"),
        ("line\n" * rp.MARKDOWN_MAX_LINES, "more than 1 000 lines"),
        ("|" + "a|" * 200 + "\n|" + "-|" * 200, "tables are too large"),
        ("a" * (rp.MARKDOWN_MAX_RUN + 1), "without a space"),
        ("> " * 5000 + "deep", "nested too deeply"),
        ("- " * 100 + "deep list", "nested too deeply"),
        ("1. " * 40 + "deep numbered list", "nested too deeply"),
    ],
)
def test_hostile_markdown_is_plain_text(text: str, why: str) -> None:
    assert why in rp.markdown_problem(text)
    plan = rp.plan(text, markdown=True)
    assert not plan.markdown and why in plan.reason


def test_ordinary_markdown_stays_markdown() -> None:
    text = "# Title\n\n- a\n  - b\n\n> quote\n\n```python\nprint(1)\n```\n| a | b |\n|---|---|\n"
    assert rp.markdown_problem(text) == ""
    assert rp.plan(text, markdown=True) == rp.RenderPlan(True, text)


def test_long_text_is_elided_in_the_middle_and_nothing_is_invented() -> None:
    text = "".join(f"line {i}\n" for i in range(200_000))  # ~1.5 MB
    plan = rp.plan(text, markdown=True)
    assert plan.elided and not plan.markdown
    assert text.startswith(plan.head) and text.endswith(plan.tail)
    assert len(plan.head) + plan.hidden + len(plan.tail) == len(text)
    assert plan.head.count("\n") <= rp.PLAIN_HEAD_LINES
    assert plan.tail.count("\n") <= rp.PLAIN_TAIL_LINES
    assert rp.describe_hidden(
        plan.hidden
    ) == f"… {plan.hidden:,} characters not shown here …".replace(",", " ")
    assert rp.plan(text, markdown=True, show_all=True).head == text


def test_one_huge_line_is_elided_too() -> None:
    text = "x" * 3_000_000
    plan = rp.plan(text, markdown=False)
    assert plan.elided and len(plan.head) == rp.PLAIN_HEAD_CHARS
    assert len(plan.tail) == rp.PLAIN_TAIL_CHARS


def test_the_depth_check_does_not_backtrack() -> None:
    """Lines nested just below the limit are Markdown (and checking them is quick)."""
    text = ("> " * rp.MARKDOWN_MAX_DEPTH + "x\n") * 300
    assert rp.markdown_problem(text) == ""
