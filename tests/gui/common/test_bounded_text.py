"""A paste too long for the box is refused in one line and changes nothing; others land where
the cursor is; text with a long unbroken run wraps anywhere (linear layout)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData
from PySide6.QtGui import QGuiApplication, QTextCursor, QTextOption

from chatapp.gui.common.bounded_text import (
    LONG_RUN_CHARS,
    MAX_TEXT_CHARS,
    MAX_TEXT_LINES,
    BoundedPlainTextEdit,
    line_breaks,
)

WORD_WRAP = QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere


def _box(qtbot, max_chars: int = 100) -> BoundedPlainTextEdit:
    box = BoundedPlainTextEdit("a message", max_chars=max_chars)
    qtbot.addWidget(box)
    box.resize(400, 100)
    box.show()
    return box


def _paste(box: BoundedPlainTextEdit, text: str) -> None:
    QGuiApplication.clipboard().setText(text)
    box.setFocus()
    box.paste()


def test_a_paste_within_the_limit_lands_at_the_cursor(qtbot) -> None:
    box = _box(qtbot)
    box.setPlainText("Hello world")
    cursor = box.textCursor()
    cursor.setPosition(6)
    box.setTextCursor(cursor)
    with qtbot.assertNotEmitted(box.sig_refused):
        _paste(box, "big ")
    assert box.toPlainText() == "Hello big world"


def test_a_paste_over_the_limit_is_refused_and_keeps_the_text(qtbot) -> None:
    box = _box(qtbot)
    box.setPlainText("typed before")
    box.moveCursor(QTextCursor.MoveOperation.End)
    with qtbot.waitSignal(box.sig_refused, timeout=1000) as refused:
        _paste(box, "y" * 95)
    assert box.toPlainText() == "typed before"
    assert box.textCursor().position() == len("typed before")
    message = refused.args[0]
    assert message == box.last_refusal
    assert "\n" not in message
    assert (
        message
        == "Not pasted: 95 characters is more than a model can read (a message holds at most 100)."
    )
    # Typing still works, and a paste that fits is taken.
    qtbot.keyClicks(box, "!")
    _paste(box, " ok")
    assert box.toPlainText() == "typed before! ok"


def test_the_text_a_paste_replaces_is_not_counted(qtbot) -> None:
    box = _box(qtbot)
    box.setPlainText("a" * 90)
    box.selectAll()
    with qtbot.assertNotEmitted(box.sig_refused):
        _paste(box, "b" * 100)  # replaces all 90: exactly the limit
    assert box.toPlainText() == "b" * 100
    _paste(box, "c")
    assert box.toPlainText() == "b" * 100  # one more is refused


def test_a_drop_is_bounded_too(qtbot) -> None:
    box = _box(qtbot)
    mime = QMimeData()
    mime.setText("z" * 101)
    with qtbot.waitSignal(box.sig_refused, timeout=1000):
        box.insertFromMimeData(mime)  # what a drop and a middle click call as well
    assert box.toPlainText() == ""
    mime.setText("dropped")
    box.insertFromMimeData(mime)
    assert box.toPlainText() == "dropped"


def test_a_long_unbroken_run_wraps_anywhere(qtbot) -> None:
    box = _box(qtbot, max_chars=1 << 20)
    assert box.wordWrapMode() == WORD_WRAP
    _paste(box, "see " + "q" * (LONG_RUN_CHARS + 1))
    assert box.wordWrapMode() == QTextOption.WrapMode.WrapAnywhere
    assert box.toPlainText().endswith("q" * (LONG_RUN_CHARS + 1))
    box.setPlainText("ordinary words again")
    assert box.wordWrapMode() == WORD_WRAP
    box.setPlainText("r" * 300_000)  # a message being edited: never refused, wraps anywhere
    assert box.wordWrapMode() == QTextOption.WrapMode.WrapAnywhere
    assert box.length() == 300_000


def test_the_wrap_changes_only_while_the_box_holds_short_lines(qtbot) -> None:
    """Switching to word wrap while a long run is still in the box lays it out the quadratic
    way (cancelling the edit of a 1 MB word took 47 s): the text goes first, then the mode."""
    box = _box(qtbot, max_chars=1 << 20)
    seen: list[tuple[QTextOption.WrapMode, int]] = []
    set_mode = box.setWordWrapMode

    def spy(mode: QTextOption.WrapMode) -> None:
        seen.append((mode, box.length()))
        set_mode(mode)

    box.setWordWrapMode = spy  # type: ignore[method-assign]
    box.setPlainText("w" * 100_000)
    box.setPlainText("draft")
    assert seen == [(QTextOption.WrapMode.WrapAnywhere, 0), (WORD_WRAP, len("draft"))]


@pytest.mark.parametrize(
    ("pasted", "lines"),
    [
        ("\n" * 10, 11),
        ("a\r\n" * 10, 11),  # \r\n is one break
        ("b\r" * 10, 11),
        ("\u2029" * 10, 11),
        ("\u2028" * 10, 11),  # line separators: one paragraph Qt lays out whole at each key
        ("x\n\r\u2028" * 4, 13),
    ],
)
def test_a_paste_of_too_many_lines_is_refused_and_keeps_the_text(
    qtbot, pasted: str, lines: int
) -> None:
    box = BoundedPlainTextEdit("a message", max_chars=1000, max_lines=10)
    qtbot.addWidget(box)
    box.setPlainText("typed")
    box.moveCursor(QTextCursor.MoveOperation.End)
    with qtbot.waitSignal(box.sig_refused, timeout=1000) as refused:
        _paste(box, pasted)
    assert box.toPlainText() == "typed"
    assert refused.args[0] == (
        f"Not pasted: {lines} lines is more than a message holds (at most 10)."
    )
    assert line_breaks(pasted) + 1 == lines


def test_lines_up_to_the_limit_are_taken_and_a_selection_frees_its_lines(qtbot) -> None:
    box = BoundedPlainTextEdit("a message", max_chars=1000, max_lines=10)
    qtbot.addWidget(box)
    box.setPlainText("one\ntwo\nthree")
    box.moveCursor(QTextCursor.MoveOperation.End)
    with qtbot.assertNotEmitted(box.sig_refused):
        _paste(box, "\n4\n5\n6\n7\n8\n9\u202810")  # exactly 10 lines
    assert box.line_count() == 10
    # A line separator arrives as a line break: what toPlainText would make of it anyway.
    assert box.toPlainText() == "one\ntwo\nthree\n4\n5\n6\n7\n8\n9\n10"
    with qtbot.waitSignal(box.sig_refused, timeout=1000):
        _paste(box, "\n11")
    assert box.line_count() == 10
    # Replacing the first three lines with one frees two.
    cursor = box.textCursor()
    cursor.setPosition(0)
    cursor.setPosition(len("one\ntwo\nthree"), QTextCursor.MoveMode.KeepAnchor)
    box.setTextCursor(cursor)
    with qtbot.assertNotEmitted(box.sig_refused):
        _paste(box, "1\n2\n3")
    assert box.line_count() == 10
    assert box.too_long(box.toPlainText()) == ""
    assert box.too_long("\n" * 10) == "11 lines, more than 10"
    assert box.too_long("c" * 1001) == "1 001 characters, more than 1 000"


def test_a_million_empty_lines_is_refused_by_the_real_limit(qtbot) -> None:
    """1 MB of line breaks is within the character limit but froze the box 3.7 s (a block per
    line): it is refused before Qt sees it."""
    box = _box(qtbot, max_chars=MAX_TEXT_CHARS)
    assert box.max_lines == MAX_TEXT_LINES == 100_000
    with qtbot.waitSignal(box.sig_refused, timeout=1000) as refused:
        _paste(box, "\n" * 1_000_000)
    assert box.toPlainText() == ""
    assert refused.args[0] == (
        "Not pasted: 1 000 001 lines is more than a message holds (at most 100 000)."
    )


def test_a_paste_with_a_line_too_long_to_type_in_is_refused(qtbot) -> None:
    """Qt lays the whole paragraph out again at every keystroke: a line over the limit is
    refused, whether alone, among short lines, or joining the line at the cursor."""
    box = BoundedPlainTextEdit("a message", max_chars=10_000, max_line_chars=100)
    qtbot.addWidget(box)
    box.setPlainText("x" * 60)
    box.moveCursor(QTextCursor.MoveOperation.End)
    refusal = "Not pasted: a line longer than 100 characters is more than a message takes."
    for pasted in ("y" * 101, "short\n" + "z" * 101 + "\nshort", "w" * 41, "v" * 41 + "\nok"):
        with qtbot.waitSignal(box.sig_refused, timeout=1000) as refused:
            _paste(box, pasted)
        assert refused.args == [refusal]
        assert box.toPlainText() == "x" * 60
    with qtbot.assertNotEmitted(box.sig_refused):
        _paste(box, "u" * 40 + "\n" + "t" * 100 + "\u2028" + "s" * 100)
    assert box.toPlainText() == "x" * 60 + "u" * 40 + "\n" + "t" * 100 + "\n" + "s" * 100
    assert box.too_long("r" * 101) == "a line of more than 100 characters"
    assert box.too_long(("r" * 100 + "\r\n") * 3) == ""
