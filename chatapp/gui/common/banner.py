"""An inline message strip above the chat: errors and warnings without a blocking dialog.

Each message shown gets the next `serial`, so that what it said can be cleared once it is old:
a message about a failure that a good answer shows is over (`until_answer`: a device that
failed, an answer or a load that failed) goes when an answer that started after it succeeds
(`dismiss_if_before`); a notice (the history moved aside, read-only) stays until dismissed."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, colors, on_theme


class MessageBanner(QFrame):
    sig_closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBanner")
        self.level = ""
        self.serial = 0  # of the message shown last; each new one counts up
        self.until_answer = False  # the message shown is old once an answer succeeds
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
        on_theme(self, self._style)

    def _style(self, c: ThemeColors) -> None:
        """The level's colours, derived from the palette (light or dark alike)."""
        level = c.banners.get(self.level) or c.banners["info"]
        self.setStyleSheet(
            f"#messageBanner {{ background: {level.background.name()}; "
            f"border: 1px solid {level.border.name()}; border-radius: 4px; }} "
            f"#bannerText, #bannerCloseButton {{ color: {level.text.name()}; }}"
        )

    def show_message(self, text: str, level: str = "error", until_answer: bool = False) -> None:
        self.level = level
        self.serial += 1
        self.until_answer = until_answer
        self._style(colors())
        self.label.setText(text)
        self.show()

    def text(self) -> str:
        return self.label.text()

    def dismiss_if_before(self, serial: int) -> None:
        """Hide a message that a good answer makes old, if it was shown when `serial` was
        current or earlier."""
        if self.isVisible() and self.until_answer and self.serial <= serial:
            self.dismiss()

    def dismiss(self) -> None:
        self.hide()
        self.level = ""
        emit(self.sig_closed)
