"""An inline message strip above the chat: errors and warnings without a blocking dialog."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

from chatapp.gui.common.qtcompat import emit

STYLES = {
    "error": ("#fdecea", "#f5b7b1", "#7f1d1d"),
    "warning": ("#fff7e6", "#f6d28b", "#7c4a03"),
    "info": ("#eaf2fd", "#b6cff5", "#1e3a8a"),
}


class MessageBanner(QFrame):
    sig_closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBanner")
        self.level = ""
        self.label = QLabel(self)
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        # Messages quote file names and chat titles: "<img src=...>" in one is not markup.
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.close_button = QToolButton(self)
        self.close_button.setObjectName("bannerCloseButton")
        self.close_button.setText("✕")
        self.close_button.setAutoRaise(True)
        self.close_button.setToolTip("Dismiss")
        self.close_button.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 4, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.close_button, 0, Qt.AlignmentFlag.AlignTop)
        self.hide()

    def show_message(self, text: str, level: str = "error") -> None:
        background, border, color = STYLES.get(level, STYLES["info"])
        self.level = level
        self.setStyleSheet(
            f"#messageBanner {{ background: {background}; border: 1px solid {border}; "
            f"border-radius: 4px; }} #bannerText {{ color: {color}; }}"
        )
        self.label.setText(text)
        self.show()

    def text(self) -> str:
        return self.label.text()

    def dismiss(self) -> None:
        self.hide()
        self.level = ""
        emit(self.sig_closed)
