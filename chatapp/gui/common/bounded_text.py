"""A plain-text box that a huge paste cannot freeze (the prompt box, the system prompt).

Measured offscreen on the 2-core machine (insert, then one keystroke; scripts/paste_cost.py):
- a paste of ordinary text costs about 0.3 s per million characters to lay out, and a long
  single line costs as much again at every keystroke (Qt lays the whole paragraph out again);
- a run of characters with no space in it (base64, a minified file) is quadratic with Qt's
  default word wrap: 100 000 characters took 0.5 s, 300 000 took 4.6 s, a million did not
  finish in two minutes; wrapping anywhere makes it linear again.

- every line is a block of its own, and a block costs about 3.7 µs to insert whatever it
  holds: a paste of 1 000 000 empty lines (1 MB, within `max_chars`) froze the box for 3.7 s,
  300 000 lines 1.3 s, and a failed answer that gives such a prompt back paid it again; a
  million Unicode line separators (U+2028) stay one paragraph, re-laid at every keystroke
  (0.33 s each);
- Qt lays out again the whole paragraph a key is typed in, at about 0.43 µs a character: a
  1 MB line of words cost 0.44 s a keystroke, 200 000 characters 0.09 s.

So a paste (or drop) that would make the text longer than `max_chars`, give it more than
`max_lines` lines, or hold a line longer than `max_line_chars`, is refused with one line
saying so, and the text already there is left as it was (the clipboard still holds the
paste); line separators arrive as line breaks (what toPlainText makes of them anyway); and
text with a long unbroken run is wrapped anywhere instead of at word boundaries.
"""

from __future__ import annotations

import re

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor, QTextDocument, QTextOption
from PySide6.QtWidgets import QPlainTextDocumentLayout, QPlainTextEdit, QWidget

from chatapp.gui.common.qtcompat import emit

# A million characters is about 250 000 tokens of ordinary text: more than the context of the
# models chatapp runs (the default model holds 8 192 tokens; with its longest vocabulary
# entry, 81 characters, no chat over 663 552 characters can fit it), and the box stays
# usable (a paste of this size lays out in about 0.3 s). It is also the most of a system
# prompt an import takes (store/export.py).
MAX_TEXT_CHARS = 1 << 20
# Runs of non-space characters longer than this switch the box to wrapping anywhere: Qt's
# word wrap looks for a break from every line start to the run's end (quadratic), while a run
# of this length still costs well under a millisecond that way.
LONG_RUN_CHARS = 2000
_LONG_RUN = re.compile(rf"\S{{{LONG_RUN_CHARS},}}")
# 100 000 lines lay out in about 0.3 s, as a million characters do; no model chatapp runs reads
# that many lines of text (a line of words is a token or more, plus its line break's).
MAX_TEXT_LINES = 100_000
LINE_SEPARATOR = "\u2028"
# 200 000 characters: about 50 000 tokens of words, more than a line of chat needs.
MAX_LINE_CHARS = 200_000
_BREAKS = "\n\r\u2028\u2029"
_FIRST_BREAK = re.compile(f"[{_BREAKS}]")


class BoundedPlainTextEdit(QPlainTextEdit):
    """Refuses pastes and drops beyond `max_chars` (sig_refused says why, in one line)."""

    sig_refused = Signal(str)

    def __init__(
        self,
        what: str,
        parent: QWidget | None = None,
        max_chars: int = MAX_TEXT_CHARS,
        max_lines: int = MAX_TEXT_LINES,
        max_line_chars: int = MAX_LINE_CHARS,
    ) -> None:
        super().__init__(parent)
        self.what = what  # "a message", "the system prompt": for the refusal
        self.max_chars = max_chars
        self.max_lines = max_lines
        self.max_line_chars = max_line_chars
        self._long_line = re.compile(f"[^{_BREAKS}]{{{max_line_chars + 1}}}")
        self.last_refusal = ""
        # The text sent, kept laid out while its answer starts (set_aside / take_back).
        self._aside: tuple[QTextDocument, QTextOption.WrapMode] | None = None

    def length(self) -> int:
        """Characters in the box (UTF-16 units, as Qt counts them), without copying them."""
        return self.document().characterCount() - 1

    def line_count(self) -> int:
        return self.document().blockCount()

    def insertFromMimeData(self, source: QMimeData) -> None:
        text = source.text() if source.hasText() else ""
        cursor = self.textCursor()
        selected = cursor.selectionEnd() - cursor.selectionStart()
        total = self.length() - selected + len(text)
        document = self.document()
        selected_breaks = (
            document.findBlock(cursor.selectionEnd()).blockNumber()
            - document.findBlock(cursor.selectionStart()).blockNumber()
        )
        breaks = line_breaks(text)
        lines = self.line_count() - selected_breaks + breaks
        # Short enough for the status bar of a narrow window.
        if total > self.max_chars:
            self._refuse(
                f"Not pasted: {_count(len(text))} characters is more than a model can read "
                f"({self.what} holds at most {_count(self.max_chars)})."
            )
            return
        if lines > self.max_lines:
            self._refuse(
                f"Not pasted: {_count(breaks + 1)} lines is more than {self.what} holds "
                f"(at most {_count(self.max_lines)})."
            )
            return
        # The line the paste joins counts whole (a little strict, and never a scan of it).
        first = _FIRST_BREAK.search(text)
        joined = cursor.block().length() - 1 + (len(text) if first is None else first.start())
        if joined > self.max_line_chars or (first and self._long_line.search(text)):
            self._refuse(
                f"Not pasted: a line longer than {_count(self.max_line_chars)} characters "
                f"is more than {self.what} takes."
            )
            return
        if _LONG_RUN.search(text):
            self.wrap_anywhere(True)
        if LINE_SEPARATOR in text:
            source = QMimeData()
            source.setText(text.replace(LINE_SEPARATOR, "\n"))
        super().insertFromMimeData(source)

    def _refuse(self, line: str) -> None:
        self.last_refusal = line
        emit(self.sig_refused, line)

    def too_long(self, text: str) -> str:
        """Why `text` is more than the box takes ("" when it is not), in a few words."""
        if len(text) > self.max_chars:
            return f"{_count(len(text))} characters, more than {_count(self.max_chars)}"
        lines = line_breaks(text) + 1
        if lines > self.max_lines:
            return f"{_count(lines)} lines, more than {_count(self.max_lines)}"
        if self._long_line.search(text):
            return f"a line of more than {_count(self.max_line_chars)} characters"
        return ""

    def setPlainText(self, text: str) -> None:
        """Set the whole text (any length: a message being edited, a saved system prompt),
        choosing the wrap first so that laying it out stays linear."""
        long_run = _LONG_RUN.search(text) is not None
        if long_run:
            self.wrap_anywhere(True)
        super().setPlainText(text)
        if not long_run:  # only now: the old text would be laid out again by word
            self.wrap_anywhere(False)

    def set_aside(self) -> None:
        """Empty the box at once, keeping its document (text, layout, undo) for `take_back`:
        a prompt given back after a failed start is laid out again otherwise (0.25-0.5 s for
        100 000 lines; putting the document back costs 0.02-0.09 s)."""
        self.drop_set_aside()
        kept = self.document()
        kept.setParent(self)  # ours now: a replaced document of the box's own is deleted
        fresh = QTextDocument(self)
        fresh.setDocumentLayout(QPlainTextDocumentLayout(fresh))
        fresh.setDefaultFont(kept.defaultFont())
        self._aside = (kept, self.wordWrapMode())
        self.setDocument(fresh)
        self.wrap_anywhere(False)

    def take_back(self, text: str) -> bool:
        """Put the text set aside back, if it is `text` (give or take the white space around
        it, which the chat trims: the box gets it back as typed) and the box is still empty."""
        if self._aside is None or self.length() > 0:
            return False
        kept, mode = self._aside
        if kept.toPlainText().strip() != text.strip():
            return False
        self._aside = None
        empty = self.document()
        self.setWordWrapMode(mode)  # first: its long runs are laid out anywhere
        self.setDocument(kept)
        empty.deleteLater()
        self.moveCursor(QTextCursor.MoveOperation.End)
        return True

    def drop_set_aside(self) -> None:
        if self._aside is not None:
            self._aside[0].deleteLater()
            self._aside = None

    def wrap_anywhere(self, on: bool) -> None:
        mode = (
            QTextOption.WrapMode.WrapAnywhere
            if on
            else QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere
        )
        if self.wordWrapMode() != mode:
            self.setWordWrapMode(mode)


def line_breaks(text: str) -> int:
    """The line breaks a QTextCursor makes blocks of (\\r\\n counts once), and the line
    separators a paste turns into breaks."""
    return (
        text.count("\n")
        + text.count("\r")
        - text.count("\r\n")
        + text.count("\u2029")
        + text.count(LINE_SEPARATOR)
    )


def _count(n: int) -> str:
    return f"{n:,}".replace(",", " ")  # as the message viewer writes counts


class SendingTextEdit(BoundedPlainTextEdit):
    """Enter sends (sig_submit), Shift+Enter starts a new line: the prompt box's keys, and
    the Reply as tool box's."""

    sig_submit = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                # A plain "\n" (QPlainTextEdit would insert a Unicode line separator).
                self.insertPlainText("\n")
            else:
                emit(self.sig_submit)
            event.accept()
            return
        super().keyPressEvent(event)
