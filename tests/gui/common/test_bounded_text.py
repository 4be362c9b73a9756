"""A paste too long for the box is refused in one line and changes nothing; others land where
the cursor is; text with a long unbroken run wraps anywhere (linear layout)."""

from __future__ import annotations

from PySide6.QtCore import QMimeData
from PySide6.QtGui import QGuiApplication, QTextCursor, QTextOption

from chatapp.gui.common.bounded_text import LONG_RUN_CHARS, BoundedPlainTextEdit

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
