"""An inline message strip above the chat: errors and warnings without a blocking dialog.

Each message shown gets the next `serial`, so that what it said can be cleared once it is old:
a message about a failure that a good answer shows is over (`until_answer`: a device that
failed, an answer or a load that failed) goes when an answer that started after it succeeds
(`dismiss_if_before`); a notice (the history moved aside, read-only) stays until dismissed.
A message may name its `cause` ("import", "tools", "export"): when that operation next
succeeds, the message goes (`dismiss_cause`), while a message about something else stays.
A message may offer one action (a button beside it: "Load SmolLM2"); pressing it dismisses the
message and runs the action."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

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
        self.cause = ""  # what failed, for a message that its next success makes old
        self.label = QLabel(self)
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        # Messages quote file names and chat titles: "<img src=...>" in one is not markup.
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action_button = QPushButton(self)
        self.action_button.setObjectName("bannerActionButton")
        self.action_button.hide()
        self.action_button.clicked.connect(self._on_action)
        self._action: Callable[[], object] | None = None
        self.close_button = QToolButton(self)
        self.close_button.setObjectName("bannerCloseButton")
        self.close_button.setText("✕")
        self.close_button.setAutoRaise(True)
        self.close_button.setToolTip("Dismiss")
        self.close_button.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 4, 6)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.action_button, 0, Qt.AlignmentFlag.AlignTop)
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

    def show_message(
        self,
        text: str,
        level: str = "error",
        until_answer: bool = False,
        action: tuple[str, Callable[[], object]] | None = None,
        cause: str = "",
    ) -> None:
        """`action`: a button's label and what pressing it does (None: no button)."""
        self.level = level
        self.serial += 1
        self.until_answer = until_answer
        self.cause = cause
        self._style(colors())
        self.label.setText(text)
        self._action = action[1] if action is not None else None
        self.action_button.setText(action[0] if action is not None else "")
        self.action_button.setVisible(action is not None)
        self.show()

    def _on_action(self) -> None:
        act = self._action
        self.dismiss()
        if act is not None:
            act()

    def text(self) -> str:
        return self.label.text()

    def dismiss_if_before(self, serial: int) -> None:
        """Hide a message that a good answer makes old, if it was shown when `serial` was
        current or earlier."""
        if self.isVisible() and self.until_answer and self.serial <= serial:
            self.dismiss()

    def dismiss_cause(self, cause: str) -> None:
        """Hide the message if it told of `cause` failing (which just succeeded)."""
        if self.isVisible() and cause and self.cause == cause:
            self.dismiss()

    def dismiss(self) -> None:
        self.hide()
        self.level = ""
        self.cause = ""
        self._action = None
        emit(self.sig_closed)
