"""A section that folds to its header: an arrow and a title, and while it is folded a one-line
summary under it of what it holds ("Precise · 256 tokens · Chat"), so that a folded section
still says what the next answer uses. The side panel is made of these: at 1366x768 its
figures, loop, sampling and system prompt together are twice the screen's height."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QFont, QResizeEvent
from PySide6.QtWidgets import (
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import muted

HEADER_MIN_WIDTH = 80
SUMMARY_INDENT = 22  # past the header's arrow


class ElidedLabel(QLabel):
    """One line that ends in "…" where the width runs out, and never widens its parent; the
    whole text is its tooltip."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._full = ""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def set_full_text(self, text: str) -> None:
        self._full = text
        self.setToolTip(text)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        margins = self.contentsMargins()
        width = max(0, self.width() - margins.left() - margins.right())
        self.setText(self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, width))


class Section(QWidget):
    """`body` under a header button that folds and unfolds it. sig_toggled(open): the person
    clicked the header (set_open does not announce)."""

    sig_toggled = Signal(bool)

    def __init__(self, title: str, body: QWidget, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName(f"{name}Section")
        self.body = body
        self.header = QToolButton(self)
        self.header.setObjectName(f"{name}Header")
        self._open = True  # not a checkable button: a checked one draws as pressed
        self.header.setAutoRaise(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.header.setArrowType(Qt.ArrowType.DownArrow)
        self.header.setText(title)
        font = QFont(self.header.font())
        font.setWeight(QFont.Weight.DemiBold)
        self.header.setFont(font)
        self.header.setFocusPolicy(Qt.FocusPolicy.TabFocus)
        # A long title is cut rather than widening its panel (the side panel's narrowest
        # decides whether an 800 px window holds the conversation list too).
        self.header.setMinimumWidth(HEADER_MIN_WIDTH)
        self.summary = ElidedLabel(self)
        self.summary.setObjectName(f"{name}Summary")
        muted(self.summary)
        self.summary.hide()
        # The summary goes under the title, indented past the arrow: beside it, in a panel
        # 300 px wide, it was cut after two words.
        self.summary.setContentsMargins(SUMMARY_INDENT, 0, 0, 2)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.header, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addWidget(self.summary)
        layout.addWidget(body)
        self.header.clicked.connect(self._on_clicked)
        self._sync()

    def title(self) -> str:
        return self.header.text()

    def set_title(self, title: str) -> None:
        self.header.setText(title)

    def is_open(self) -> bool:
        return self._open

    def set_open(self, open_: bool) -> None:
        self._open = open_
        self._sync()

    def set_summary(self, text: str) -> None:
        """What the folded section holds, in one line beside its title."""
        self.summary.set_full_text(text)
        self._sync()

    @Slot()
    def _on_clicked(self) -> None:
        self.set_open(not self._open)
        emit(self.sig_toggled, self._open)

    def _sync(self) -> None:
        open_ = self._open
        self.header.setArrowType(Qt.ArrowType.DownArrow if open_ else Qt.ArrowType.RightArrow)
        self.header.setToolTip(f"{'Fold' if open_ else 'Unfold'} {self.header.text()}")
        self.header.setAccessibleName(f"{self.header.text()} ({'open' if open_ else 'folded'})")
        self.body.setVisible(open_)
        self.summary.setVisible(not open_ and bool(self.summary.full_text()))
