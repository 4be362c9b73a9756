"""A scroll area that keeps showing what it shows when something above it changes height.

The side panel scrolls (1366x768 and smaller): its live figures sit at the top, and their notes
come and go while an answer streams (the warm-up bar, the prompt note, the context note). With
a plain QScrollArea the part the person had scrolled to moved by each change: the panel seemed
to scroll by itself. As browsers anchor scrolling, this one keeps the pane at the top of the
view where it was, unless the view is at the top (then the top stays the top).
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, QTimer, Slot
from PySide6.QtWidgets import QScrollArea, QWidget


class AnchoredScrollArea(QScrollArea):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._anchor: tuple[QWidget, int] | None = None  # a pane and its top's offset
        self._settling = False  # the content changed height: values are the range's, not ours
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._remember)
        bar.rangeChanged.connect(self._on_range_changed)

    @Slot(int, int)
    def _on_range_changed(self, _low: int, _high: int) -> None:
        # The content's height changed; once its layout has moved the panes, go back to the
        # remembered one (a value clamped to the new range meanwhile is not remembered).
        if not self._settling:
            self._settling = True
            QTimer.singleShot(0, self._restore)

    @Slot(int)
    def _remember(self, value: int) -> None:
        if self._settling:
            return
        content = self.widget()
        child = None
        if content is not None and value > 0:
            child = content.childAt(QPoint(content.width() // 2, value + 1))
            # The pane there (a group box, not a label in it): the content's layout moves it.
            while child is not None and child.parentWidget() is not content:
                child = child.parentWidget()
        self._anchor = None if child is None else (child, child.y() - value)

    def _restore(self) -> None:
        self._settling = False
        content, anchor = self.widget(), self._anchor
        bar = self.verticalScrollBar()
        if content is None or anchor is None:
            self._remember(bar.value())
            return
        child, offset = anchor
        if child.parentWidget() is not content or not child.isVisible():
            self._remember(bar.value())
            return
        bar.setValue(child.y() - offset)
        self._remember(bar.value())
