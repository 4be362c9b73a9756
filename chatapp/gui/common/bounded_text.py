"""A plain-text box that a huge paste cannot freeze (the prompt box, the system prompt).

Measured offscreen on the 2-core machine (insert, then one keystroke; scripts/paste_cost.py):
- a paste of ordinary text costs about 0.3 s per million characters to lay out, and a long
  single line costs as much again at every keystroke (Qt lays the whole paragraph out again);
- a run of characters with no space in it (base64, a minified file) is quadratic with Qt's
  default word wrap: 100 000 characters took 0.5 s, 300 000 took 4.6 s, a million did not
  finish in two minutes; wrapping anywhere makes it linear again.

So a paste (or drop) that would make the text longer than `max_chars` is refused with one line
saying so, and the text already there is left as it was; and text with a long unbroken run is
wrapped anywhere instead of at word boundaries.
"""

from __future__ import annotations

import re

from PySide6.QtCore import QMimeData, Signal
from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import QPlainTextEdit, QWidget

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


class BoundedPlainTextEdit(QPlainTextEdit):
    """Refuses pastes and drops beyond `max_chars` (sig_refused says why, in one line)."""

    sig_refused = Signal(str)

    def __init__(
        self, what: str, parent: QWidget | None = None, max_chars: int = MAX_TEXT_CHARS
    ) -> None:
        super().__init__(parent)
        self.what = what  # "a message", "the system prompt": for the refusal
        self.max_chars = max_chars
        self.last_refusal = ""

    def length(self) -> int:
        """Characters in the box (UTF-16 units, as Qt counts them), without copying them."""
        return self.document().characterCount() - 1

    def insertFromMimeData(self, source: QMimeData) -> None:
        text = source.text() if source.hasText() else ""
        cursor = self.textCursor()
        selected = cursor.selectionEnd() - cursor.selectionStart()
        total = self.length() - selected + len(text)
        if total > self.max_chars:
            # Short enough for the status bar of a narrow window.
            self.last_refusal = (
                f"Not pasted: {_count(len(text))} characters is more than a model can read "
                f"({self.what} holds at most {_count(self.max_chars)})."
            )
            emit(self.sig_refused, self.last_refusal)
            return
        if _LONG_RUN.search(text):
            self.wrap_anywhere(True)
        super().insertFromMimeData(source)

    def setPlainText(self, text: str) -> None:
        """Set the whole text (any length: a message being edited, a saved system prompt),
        choosing the wrap first so that laying it out stays linear."""
        long_run = _LONG_RUN.search(text) is not None
        if long_run:
            self.wrap_anywhere(True)
        super().setPlainText(text)
        if not long_run:  # only now: the old text would be laid out again by word
            self.wrap_anywhere(False)

    def wrap_anywhere(self, on: bool) -> None:
        mode = (
            QTextOption.WrapMode.WrapAnywhere
            if on
            else QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere
        )
        if self.wordWrapMode() != mode:
            self.setWordWrapMode(mode)


def _count(n: int) -> str:
    return f"{n:,}".replace(",", " ")  # as the message viewer writes counts
