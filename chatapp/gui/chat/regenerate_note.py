"""The note under the transcript when Regenerate would write the same answer again: greedy
sampling (temperature 0, the Precise preset) always picks the most likely token, and a fixed
seed draws the same tokens every time. One click regenerates with settings that vary."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, on_theme

VARIED_PRESET = "balanced"


@dataclass(frozen=True)
class SameAnswer:
    """Why Regenerate writes the same answer, and what the button changes."""

    text: str
    button: str
    fix: str  # "preset": use VARIED_PRESET; "seed": a random seed


def same_answer(settings: SamplingSettings, preset: str) -> SameAnswer | None:
    """Why these settings write the same answer every time (None: they vary)."""
    if settings.greedy:
        named = " (the Precise preset)" if preset == "precise" else ""
        return SameAnswer(
            f"Temperature 0{named} always picks the most likely token, so Regenerate writes "
            "the same answer again.",
            "Regenerate with Balanced",
            "preset",
        )
    if settings.seed is not None:
        return SameAnswer(
            f"The fixed seed {settings.seed} draws the same tokens every time, so Regenerate "
            "writes the same answer again.",
            "Regenerate with a random seed",
            "seed",
        )
    return None


class RegenerateNote(QFrame):
    sig_regenerate = Signal(str)  # "preset" or "seed": what to change first

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("regenerateNote")
        self.reason: SameAnswer | None = None
        self.label = QLabel("", self)
        self.label.setObjectName("regenerateNoteText")
        self.label.setWordWrap(True)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.button = QPushButton("", self)
        self.button.setObjectName("regenerateVariedButton")
        self.button.clicked.connect(self._on_clicked)
        close = QToolButton(self)
        close.setObjectName("regenerateNoteClose")
        close.setText("✕")
        close.setAutoRaise(True)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 4, 4)
        row.addWidget(self.label, 1)
        row.addWidget(self.button)
        row.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)
        on_theme(self, self._style)
        self.hide()

    def _style(self, c: ThemeColors) -> None:
        info = c.banners["info"]
        self.setStyleSheet(
            f"#regenerateNote {{ background: {info.background.name()}; border: 1px solid "
            f"{info.border.name()}; border-radius: 4px; }} "
            f"#regenerateNoteText, #regenerateNoteClose {{ color: {info.text.name()}; }}"
        )

    def offer(self, reason: SameAnswer | None) -> None:
        """Show why the answer being regenerated will be the same (None: hide the note)."""
        self.reason = reason
        if reason is None:
            self.hide()
            return
        self.label.setText(reason.text)
        self.button.setText(reason.button)
        self.show()

    def set_enabled(self, can_regenerate: bool) -> None:
        self.button.setEnabled(can_regenerate)

    @Slot()
    def _on_clicked(self) -> None:
        if self.reason is not None:
            fix = self.reason.fix
            self.hide()
            emit(self.sig_regenerate, fix)
