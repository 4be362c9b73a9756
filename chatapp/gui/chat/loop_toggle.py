"""The loop toggle: a segmented control with one button per loop (No cache | Naive |
IO-Binding), locked while an answer streams (the side panel holds it)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import QAbstractButton, QButtonGroup, QHBoxLayout, QPushButton, QWidget

from chatapp.engine.modes import MODES, Mode
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import ThemeColors, on_theme
from chatapp.session.loop_notes import LOOP_TIPS

LOCKED_TIP = "Applies to whole answers: wait for this one to finish or press Stop."


def segment_style(c: ThemeColors) -> str:
    """The segments in the palette's colours: the checked one in the selection colour."""
    return f"""
QPushButton {{ border: 1px solid {c.border.name()}; padding: 5px 6px;
    background: {c.base.name()}; color: {c.base_text.name()}; }}
QPushButton:checked {{ background: {c.accent.name()}; color: {c.accent_text.name()};
    border-color: {c.accent.name()}; }}
QPushButton:disabled {{ color: {c.disabled.name()}; }}
QPushButton:checked:disabled {{ background: {c.accent_disabled.name()};
    color: {c.accent_disabled_text.name()}; border-color: {c.accent_disabled.name()}; }}
QPushButton[segment="first"] {{
    border-top-left-radius: 5px; border-bottom-left-radius: 5px; border-right: none; }}
QPushButton[segment="middle"] {{ border-right: none; }}
QPushButton[segment="last"] {{
    border-top-right-radius: 5px; border-bottom-right-radius: 5px; }}
"""


def mode_button_name(mode: Mode) -> str:
    """The object name of a loop's button, from its label: "modeNoCacheButton", ..."""
    words = mode.label.replace("-", " ").split()
    return "mode" + "".join(w[:1].upper() + w[1:] for w in words) + "Button"


class LoopToggle(QWidget):
    """A segmented control with one button per loop, in Mode's order: No cache | Naive |
    IO-Binding."""

    sig_mode_changed = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.buttons: dict[Mode, QPushButton] = {}
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        for mode in MODES:
            button = QPushButton(mode.label, self)
            button.setObjectName(mode_button_name(mode))
            button.setToolTip(LOOP_TIPS.get(mode, mode.description))
            last = len(MODES) - 1
            button.setProperty(
                "segment",
                "first" if mode.order == 0 else "last" if mode.order == last else "middle",
            )
            button.setCheckable(True)
            button.setCursor(Qt.CursorShape.PointingHandCursor)
            self.group.addButton(button)
            layout.addWidget(button, 1)
            self.buttons[mode] = button
        self.naive_button = self.buttons[Mode.NAIVE]
        self.iobinding_button = self.buttons[Mode.IOBINDING]
        on_theme(self, lambda c: self.setStyleSheet(segment_style(c)))
        self.iobinding_button.setChecked(True)
        self.group.buttonToggled.connect(self._on_toggled)

    def mode(self) -> Mode:
        return next((m for m, b in self.buttons.items() if b.isChecked()), Mode.IOBINDING)

    def set_mode(self, mode: str) -> None:
        self.buttons[Mode(mode) if mode in MODES else Mode.IOBINDING].setChecked(True)

    def set_locked(self, locked: bool) -> None:
        for mode, button in self.buttons.items():
            button.setEnabled(not locked)
            button.setToolTip(LOCKED_TIP if locked else LOOP_TIPS.get(mode, mode.description))

    @Slot(QAbstractButton, bool)
    def _on_toggled(self, _button: QAbstractButton, checked: bool) -> None:
        if checked:
            emit(self.sig_mode_changed, self.mode())
