"""The side panel's system prompt: a bounded text box (a paste too long is refused with a note
under it) whose changes are announced once typing pauses.

Why the pause: the panel saves its settings on every change, and saving writes the whole ini
file. With a 1 MB system prompt every keystroke cost 0.36 s that way (scripts/paste_cost.py
measures the box itself); saving once typing pauses, and when the panel hides (the window
closing), keeps typing at the box's own cost.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer, Signal, Slot
from PySide6.QtGui import QHideEvent
from PySide6.QtWidgets import QGroupBox, QVBoxLayout, QWidget

from chatapp.gui.common.bounded_text import BoundedPlainTextEdit
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import warning_label

SAVE_AFTER_MS = 400
NO_DEFAULT = "Empty: no system prompt"


def default_placeholder(default: str, tokens: int) -> str:
    """What an empty box means: the model's template may write a system prompt of its own,
    counted in Context used like any other text."""
    if not default:
        return NO_DEFAULT
    return (
        f"Empty: the model's own, counted in Context used ({tokens} tokens): \u201c{default}\u201d"
    )


class SystemPromptBox(QGroupBox):
    sig_changed = Signal()  # the text changed, and typing paused (or the box is hiding)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("System prompt", parent)
        layout = QVBoxLayout(self)
        self.edit = BoundedPlainTextEdit("the system prompt", self)
        self.edit.setObjectName("systemPromptEdit")
        self.edit.setPlaceholderText(NO_DEFAULT)
        self.model_default, self.model_default_tokens = "", 0  # what an empty box sends
        self.edit.setMinimumHeight(44)
        self.note = warning_label(self, "systemPromptNote")
        layout.addWidget(self.edit)
        layout.addWidget(self.note)
        self._pending = QTimer(self)
        self._pending.setSingleShot(True)
        self._pending.setInterval(SAVE_AFTER_MS)
        self._pending.timeout.connect(self.flush)
        self.edit.textChanged.connect(self._on_text_changed)
        self.edit.sig_refused.connect(self._on_refused)

    def text(self) -> str:
        return self.edit.toPlainText()

    def set_model_default(self, default: str, tokens: int) -> None:
        """A model was loaded: what it is sent while the box is empty."""
        self.model_default, self.model_default_tokens = default, tokens
        self.edit.setPlaceholderText(default_placeholder(default, tokens))
        self.edit.setToolTip(default_placeholder(default, tokens) if default else "")

    def set_text(self, text: str) -> None:
        """Set the text as restored from the settings: nothing to save."""
        self.edit.setPlainText(text)
        self._pending.stop()

    @property
    def pending(self) -> bool:
        return self._pending.isActive()

    @Slot()
    def flush(self) -> None:
        """Announce a change not announced yet, now."""
        if self._pending.isActive():
            self._pending.stop()
        emit(self.sig_changed)

    @Slot()
    def _on_text_changed(self) -> None:
        self.note.hide()
        self._pending.start()

    @Slot(str)
    def _on_refused(self, message: str) -> None:
        self.note.setText(message)
        self.note.show()

    def hideEvent(self, event: QHideEvent) -> None:
        if self._pending.isActive():
            self.flush()
        super().hideEvent(event)
