"""Answers keep their line breaks and still read as Markdown."""

from __future__ import annotations

from PySide6.QtGui import QTextBlock

from chatapp.gui.chat import render_policy
from chatapp.gui.chat.view import ChatView
from chatapp.session.conversation import ChatMessage

POEM = "Roses are red\nViolets are blue\n\nSecond stanza\nends here"
MIXED = (
    "Lines:\nfirst\nsecond\n\n- one\n- two\n\n```python\nx = 1\ny = 2\n```\n\n"
    "**bold** and *italic*\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
)


def blocks(view: ChatView) -> list[QTextBlock]:
    found, block = [], view.transcript.document().begin()
    while block.isValid():
        found.append(block)
        block = block.next()
    return found


def texts(view: ChatView) -> list[str]:
    return [b.text() for b in blocks(view)]


def show(view: ChatView, answer: str) -> None:
    view.show_messages([ChatMessage("user", "a poem"), ChatMessage("assistant", answer)])
    view.flush()


def test_a_poem_shows_one_line_per_line(view: ChatView) -> None:
    show(view, POEM)
    shown = texts(view)
    # Each stanza one paragraph, each of its lines on a line of its own (U+2028 in Qt).
    assert "Roses are red\u2028Violets are blue" in shown
    assert "Second stanza\u2028ends here" in shown
    assert "Roses are red Violets are blue" not in view.transcript.toPlainText()


def test_markdown_still_renders_around_the_kept_breaks(view: ChatView) -> None:
    show(view, MIXED)
    by_text = {b.text(): b for b in blocks(view)}
    assert "Lines:\u2028first\u2028second" in by_text
    assert by_text["one"].textList() is not None and by_text["two"].textList() is not None
    # The code block is kept exactly, without the breaks' trailing spaces.
    assert "x = 1" in by_text and "y = 2" in by_text
    assert view.transcript.code_of(1, 0) == "x = 1\ny = 2"
    bold = next(b for b in blocks(view) if b.text().startswith("bold and italic"))
    assert bold.begin().fragment().charFormat().fontWeight() > 400
    assert "| a | b |" not in view.transcript.toPlainText()  # a table, not text


def test_a_streamed_answer_keeps_its_line_breaks_too(view: ChatView) -> None:
    view.show_messages([ChatMessage("user", "a poem")])
    view.begin_answer()
    view.append_answer(POEM[:30])
    view.flush()
    assert any(t.startswith("Roses are red\u2028") for t in texts(view))


def test_breaks_are_kept_only_inside_paragraphs() -> None:
    keep = render_policy.keep_line_breaks
    br = render_policy.LINE_BREAK
    assert keep("a\nb\nc") == f"a{br}b{br}c"
    assert keep("a\n\nb") == "a\n\nb"
    assert keep("```\nx\ny\n```") == "```\nx\ny\n```"
    assert keep("~~~\nx\n```\ny\n~~~\nz\nw") == f"~~~\nx\n```\ny\n~~~\nz{br}w"
    assert keep("# Title\ntext") == "# Title\ntext"
    assert keep("Title\n---") == "Title\n---"  # a heading's underline
    assert keep("text\n- a\n- b") == "text\n- a\n- b"  # a list after a paragraph
    assert keep("- item\n  more") == f"- item{br}more"
    assert keep("> one\n> two") == f"> one{br}two"
    assert keep("| a |\n|---|") == "| a |\n|---|"
    assert keep("    code\n    more") == "    code\n    more"
    assert keep("ends with two  \nnext") == "ends with two  \nnext"


def test_one_token_count_per_answer(qtbot, make_window, tiny_model_dir) -> None:
    import re

    from tests.gui.conftest import greedy, send_and_wait, set_sampling

    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "Count, please")
    view = window.chat.chat_view
    qtbot.waitUntil(
        lambda: (c := view.transcript.context) is not None and c.message_count == 2,
        timeout=10_000,
    )
    view.flush()
    lines = view.transcript.toPlainText().split("\n")
    header = next(line for line in lines if line.startswith("Assistant"))
    figures = next(line for line in lines if "tok/s" in line)
    counts = re.findall(r"(\d+) tokens", header) + re.findall(r"(\d+) tokens", figures)
    assert len(counts) == 1 and re.search(r"\d+ tokens of context", header)  # the context's
