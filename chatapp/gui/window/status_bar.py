"""The window's status bar: messages cut to the space they have ("…", the whole text in a
tooltip) rather than clipped, which at 200 % scaling is most of them; and, while a model loads
or a file converts, what is being done with the seconds so far and, when an earlier load of
the same model says how long it takes, the time left."""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QEvent, QRect, QSize, Qt, QTimer, Slot
from PySide6.QtGui import QHelpEvent, QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QSizeGrip,
    QStatusBar,
    QStyle,
    QStyleOption,
    QToolTip,
    QWidget,
)

from chatapp.gui.common.progress import time_left_text

MESSAGE_LEFT = 6  # where Qt's own status bar starts its message, and its gap before a widget
MESSAGE_GAP = 2


class StatusBar(QStatusBar):
    """A QStatusBar whose temporary messages (ours and the menus' status tips) are elided to
    the room left of the permanent widgets, with the whole message as the tooltip there."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("statusBar")

    def message_rect(self) -> QRect:
        """Where the message goes: up to the first permanent widget (or the size grip)."""
        left, right = MESSAGE_LEFT, self.width() - 2 * MESSAGE_LEFT
        rtl = self.layoutDirection() == Qt.LayoutDirection.RightToLeft
        for child in self._shown_widgets():
            if isinstance(child, QSizeGrip):  # in its corner, wherever it was last placed
                start, end = (0, child.width()) if rtl else (self.width() - child.width(), 0)
            else:
                start, end = child.x(), child.geometry().right() + 1
            if rtl:
                left = max(left, end + MESSAGE_GAP)
            else:
                right = min(right, start - MESSAGE_GAP)
        return QRect(left, 0, max(0, right - left), self.height())

    def _shown_widgets(self) -> list[QWidget]:
        """While a message shows, Qt hides the other widgets: the visible ones are permanent."""
        children = self.findChildren(QWidget, options=Qt.FindChildOption.FindDirectChildrenOnly)
        return [c for c in children if c.isVisible() and not c.isWindow()]

    def shown_message(self) -> str:
        """The message as it fits (the whole one when it does)."""
        message = self.currentMessage()
        if not message:
            return ""
        width = self.message_rect().width()
        return self.fontMetrics().elidedText(message, Qt.TextElideMode.ElideRight, width)

    def message_tooltip(self) -> str:
        """The whole message when it had to be cut, else ''."""
        message = self.currentMessage()
        return message if message and self.shown_message() != message else ""

    def paintEvent(self, event: QPaintEvent) -> None:
        if not self.currentMessage():
            super().paintEvent(event)
            return
        # Qt's own painting would draw the message clipped: draw the panel, the permanent
        # widgets' frames and the elided message instead.
        painter = QPainter(self)
        option = QStyleOption()
        option.initFrom(self)
        style = self.style()
        style.drawPrimitive(QStyle.PrimitiveElement.PE_PanelStatusBar, option, painter, self)
        for child in self._shown_widgets():
            if not isinstance(child, QSizeGrip):
                frame = QStyleOption()
                frame.rect = child.geometry().adjusted(-2, -1, 2, 1)
                frame.palette = self.palette()
                style.drawPrimitive(QStyle.PrimitiveElement.PE_FrameStatusBarItem, frame, painter)
        painter.setPen(self.palette().windowText().color())
        flags = Qt.AlignmentFlag.AlignLeading | Qt.AlignmentFlag.AlignVCenter
        painter.drawText(self.message_rect(), int(flags), self.shown_message())
        painter.end()

    def event(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            tip = self.message_tooltip()
            if tip and self.message_rect().contains(event.pos()):
                QToolTip.showText(event.globalPos(), tip, self, self.message_rect())
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().event(event)


class ElidedLabel(QLabel):
    """A one-line label that gives up width before the window does: its text is cut with "…"
    (the whole text then in the tooltip) rather than widening the status bar."""

    MIN_WIDTH = 60

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.full_text = ""
        self.setText(text)

    def setText(self, text: str) -> None:
        self.full_text = text
        self._elide()

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.MIN_WIDTH), hint.height())

    def sizeHint(self) -> QSize:
        width = self.fontMetrics().horizontalAdvance(self.full_text) + 2 * self.margin() + 4
        return QSize(width, super().sizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        room = self.contentsRect().width() - 2 * self.margin()
        if room > 0:
            shown = self.fontMetrics().elidedText(self.full_text, Qt.TextElideMode.ElideRight, room)
        else:
            shown = self.full_text
        super().setText(shown)
        self.setToolTip(self.full_text if shown != self.full_text else "")
        self.updateGeometry()


class BusyIndicator(QWidget):
    """An indeterminate bar and "Loading X… 3 s", with "about 10 s left" when an expected
    duration is known (an earlier load of the same model); the words update every second."""

    def __init__(
        self, parent: QWidget | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(parent)
        self.setObjectName("busyIndicator")
        self.clock = clock
        self.what = ""
        self.expected_s: float | None = None
        self.started = clock()
        self.running = False
        self.bar = QProgressBar(self)
        self.bar.setRange(0, 0)  # no fraction done is known: loading is one call
        self.bar.setMaximumWidth(120)
        self.bar.setMaximumHeight(12)
        self.bar.setTextVisible(False)
        self.label = ElidedLabel("", self)
        self.label.setObjectName("busyLabel")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.bar)
        layout.addWidget(self.label)
        self.timer = QTimer(self)
        self.timer.setInterval(1000)
        self.timer.timeout.connect(self.tick)
        self.hide()

    def start(self, what: str, expected_s: float | None = None) -> None:
        """Show "`what`…" from now on; `expected_s`: how long it took before, if known."""
        self.what, self.expected_s = what, expected_s
        self.started = self.clock()
        self.running = True
        self.timer.start()
        self.tick()
        self.show()

    def stop(self) -> None:
        self.running = False
        self.timer.stop()
        self.hide()

    def text(self) -> str:
        elapsed = self.clock() - self.started
        text = f"{self.what}…"
        if elapsed >= 1:
            text += f" {elapsed:.0f} s"
        if self.expected_s is not None:
            left = self.expected_s - elapsed
            if left >= 1:
                text += f" · {time_left_text(left)}"
            else:
                text += f" · {self.expected_s:.0f} s last time"
        return text

    @Slot()
    def tick(self) -> None:
        self.label.setText(self.text())
