"""The sampling settings' prompt rows: chat or text continuation, and the stop strings.

A base model (no chat template) continues text by default (session/prompt_style.py says
why); the person may chat with it instead, as plain User: / Assistant: lines that end where
the model starts a turn of its own. Stop strings end any answer before them; they are typed
separated by commas, with \\n for a new line. A chat remembers both (the history's settings).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import QComboBox, QFormLayout, QLabel, QLineEdit, QWidget

from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import muted, warning_label
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.session import prompt_style as ps

SAVE_AFTER_MS = 400
STOPS_TIP = (
    "The answer ends before the first of these texts. Separate them with commas; write \\n for "
    "a new line (e.g. \\nUser:), \\, for a comma."
)


class PromptOption(QWidget):
    sig_changed = Signal()  # the choice or the stop strings changed (typing paused)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.has_chat_template = True
        self._model = ""  # the model the choice was made for
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
        self.choice_combo = QComboBox(self)
        self.choice_combo.setObjectName("promptChoiceCombo")
        self.choice_combo.setAccessibleName("How the chat is sent to the model")
        for choice, label in ps.CHOICE_LABELS.items():
            self.choice_combo.addItem(label, choice)
        self.choice_note = QLabel("", self)
        self.choice_note.setObjectName("promptChoiceNote")
        self.choice_note.setWordWrap(True)
        self.choice_note.setTextFormat(Qt.TextFormat.PlainText)
        muted(self.choice_note)
        self.stops_edit = QLineEdit(self)
        self.stops_edit.setObjectName("stopStringsEdit")
        self.stops_edit.setPlaceholderText("none")
        self.stops_edit.setToolTip(STOPS_TIP)
        self.stops_edit.setAccessibleName("Stop strings")
        self.stops_note = warning_label(self, "stopStringsNote")
        form.addRow("Prompt", self.choice_combo)
        form.addRow(self.choice_note)
        form.addRow("Stop at", self.stops_edit)
        form.addRow(self.stops_note)
        ignore_wheel_unless_focused(self.choice_combo)
        self._stops: tuple[str, ...] = ()
        self._pending = QTimer(self)
        self._pending.setSingleShot(True)
        self._pending.setInterval(SAVE_AFTER_MS)
        self._pending.timeout.connect(self._announce)
        self.choice_combo.currentIndexChanged.connect(self._on_choice_changed)
        self.stops_edit.textChanged.connect(self._on_stops_edited)
        self._show_note()

    # ---- what the next answer uses --------------------------------------------------------
    def choice(self) -> str:
        return str(self.choice_combo.currentData())

    def prompt_style(self) -> str:
        """The engine's prompt style (engine/text/chat.py PROMPT_STYLES)."""
        return ps.engine_style(self.choice(), self.has_chat_template)

    def stops(self) -> tuple[str, ...]:
        """The person's stop strings, with those plain-line chat needs."""
        return ps.answer_stops(self._stops, self.prompt_style())

    def user_stops(self) -> tuple[str, ...]:
        return self._stops

    # ---- a model, a chat ------------------------------------------------------------------
    def set_chat_template(self, has_chat_template: bool, model: str = "") -> None:
        """A model was loaded: a base model continues text, a chat model chats. The same
        model again (another device, other threads) keeps what the person chose."""
        same = bool(model) and model == self._model and has_chat_template == self.has_chat_template
        self.has_chat_template, self._model = has_chat_template, model
        choice = self.choice() if same else ps.default_choice(has_chat_template)
        self.set_state(choice, self._stops)

    def set_state(self, choice: str, stops: tuple[str, ...]) -> None:
        """As a chat or the settings remember it: nothing to save."""
        self.choice_combo.blockSignals(True)
        self.stops_edit.blockSignals(True)
        try:
            index = self.choice_combo.findData(choice)
            self.choice_combo.setCurrentIndex(max(index, 0))
            self._stops = stops
            self.stops_edit.setText(ps.format_stops(stops))
        finally:
            self.choice_combo.blockSignals(False)
            self.stops_edit.blockSignals(False)
        self.stops_note.setVisible(False)
        self._show_note()

    @Slot(int)
    def _on_choice_changed(self, _index: int) -> None:
        self._show_note()
        self._announce()

    @Slot(str)
    def _on_stops_edited(self, text: str) -> None:
        try:
            self._stops = ps.parse_stops(text)
        except ValueError as exc:
            self.stops_note.setText(str(exc))
            self.stops_note.setVisible(True)
            return
        self.stops_note.setVisible(False)
        self._pending.start()

    def _show_note(self) -> None:
        self.choice_note.setText(ps.describe(self.choice(), self.has_chat_template))

    @Slot()
    def _announce(self) -> None:
        self._pending.stop()
        emit(self.sig_changed)
