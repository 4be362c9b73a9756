"""Progress with the time left: a bar and "about 2 min left" for the context sweep, the
comparison and conversions, estimated from the time so far and the fraction done."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QProgressDialog, QWidget

from chatapp.gui.common.theme import muted

# No estimate before this much is done and this long has passed: the first steps (warm-up,
# loading) say little about the rest.
MIN_FRACTION = 0.03
MIN_SECONDS = 1.5


def time_left_text(seconds: float) -> str:
    """'about 40 s left', 'about 3 min left', 'about 1 h 20 min left'."""
    if seconds < 10:
        return "a few seconds left"
    if seconds < 60:
        return f"about {round(seconds / 5) * 5:.0f} s left"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min left"
    return f"about {minutes // 60} h {minutes % 60} min left"


class TimeLeft:
    """Estimates the time left of one task from its fraction done (restart() per task)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()

    def restart(self) -> None:
        self.started = self.clock()

    def seconds(self, fraction: float) -> float | None:
        elapsed = self.clock() - self.started
        if fraction < MIN_FRACTION or elapsed < MIN_SECONDS or fraction >= 1.0:
            return None
        return elapsed * (1.0 - fraction) / fraction

    def text(self, fraction: float) -> str:
        """'about 2 min left', or '' while there is no estimate yet."""
        left = self.seconds(fraction)
        return time_left_text(left) if left is not None else ""


class ProgressWithTimeLeft(QWidget):
    """A bar and the time left beside it; hidden while nothing runs."""

    def __init__(
        self, parent: QWidget | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(parent)
        self.estimate = TimeLeft(clock)
        self.bar = QProgressBar(self)
        self.bar.setObjectName("progressBar")
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(14)
        self.left_label = QLabel("", self)
        self.left_label.setObjectName("timeLeftLabel")
        muted(self.left_label)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bar, 1)
        layout.addWidget(self.left_label)
        self.hide()

    def start(self) -> None:
        self.estimate.restart()
        self.bar.setValue(0)
        self.left_label.setText("")
        self.show()

    def set_fraction(self, fraction: float) -> None:
        fraction = min(1.0, max(0.0, fraction))
        self.bar.setValue(max(self.bar.value(), round(fraction * 1000)))  # never backwards
        self.left_label.setText(self.estimate.text(self.bar.value() / 1000))

    def finish(self) -> None:
        self.hide()


LABEL_WIDTH = 440  # the dialog's text, wrapped to this many pixels (a plan line made it 945)


def fit_lines(text: str, metrics: QFontMetrics, width: int) -> str:
    """`text` broken into lines of at most `width` pixels at word boundaries; a word wider
    than that on its own (a long file name or path) is cut in its middle with "…"."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            if metrics.horizontalAdvance(word) > width:
                word = metrics.elidedText(word, Qt.TextElideMode.ElideMiddle, width)
            candidate = f"{line} {word}" if line else word
            if line and metrics.horizontalAdvance(candidate) > width:
                lines.append(line)
                line = word
            else:
                line = candidate
        lines.append(line)
    return "\n".join(lines)


class ConversionProgressDialog:
    """A conversion's progress dialog: percent done and `label` (with `{message}` and
    `{left}`, the time left) filled from each report. It opens on `open()` or on the first
    report, and Cancel calls `cancel`. Its text is wrapped to LABEL_WIDTH (long names cut in
    the middle, the whole text in the tooltip): the dialog never stretches across the screen."""

    def __init__(
        self,
        parent: QWidget,
        object_name: str,
        title: str,
        label: str,
        cancel: Callable[[], None],
        min_width: int = 0,
    ) -> None:
        self.parent, self.object_name, self.title = parent, object_name, title
        self.label, self.cancel, self.min_width = label, cancel, min_width
        self.dialog: QProgressDialog | None = None
        self.time_left = TimeLeft()
        self.note = ""  # a first line that stays (what the conversion takes)
        self._step = ""  # the label's text below the note

    def open(self, text: str = "") -> QProgressDialog:
        if self.dialog is None:
            dialog = QProgressDialog("", "Cancel", 0, 100, self.parent)
            dialog.setObjectName(self.object_name)
            dialog.setWindowTitle(self.title)
            # Not modal: a modal QProgressDialog runs processEvents() inside setValue(), and a
            # job's "finished" signal would then arrive in the middle of a progress update.
            dialog.setWindowModality(Qt.WindowModality.NonModal)
            dialog.setAutoClose(False)
            dialog.setAutoReset(False)
            dialog.setMinimumDuration(0)
            if self.min_width:
                dialog.setMinimumWidth(self.min_width)
            dialog.setMaximumWidth(max(self.min_width, LABEL_WIDTH + 80))
            dialog.canceled.connect(self.cancel)
            self.dialog = dialog
            self._step = text
            self._show()
            dialog.show()
            self.time_left.restart()
        return self.dialog

    def set_note(self, note: str) -> None:
        """A line above the step (what the conversion takes), kept until the dialog closes."""
        self.note = note
        if self.dialog is not None:
            self._show()

    def report(self, fraction: float, message: str) -> None:
        dialog = self.open()
        left = self.time_left.text(fraction)
        self._step = self.label.format(message=message, left=left).rstrip()
        self._show()
        dialog.setValue(int(fraction * 100))

    def text(self) -> str:
        """The dialog's whole text, as it reads before wrapping."""
        return "\n".join(line for line in (self.note, self._step) if line)

    def _show(self) -> None:
        assert self.dialog is not None
        text = self.text()
        self.dialog.setLabelText(fit_lines(text, self.dialog.fontMetrics(), LABEL_WIDTH))
        self.dialog.setToolTip(text)

    def close(self) -> None:
        if self.dialog is not None:
            self.dialog.canceled.disconnect(self.cancel)
            self.dialog.close()
            self.dialog.deleteLater()
            self.dialog = None
        self.note = self._step = ""
