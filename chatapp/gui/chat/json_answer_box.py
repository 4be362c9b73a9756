"""The sampling settings' "JSON answer" option: when checked, the answer is constrained to JSON
(chatapp/engine/structured/constraints.py), any object or the one a pasted JSON schema describes.

The schema box appears only while the option is checked. Its text is checked as JSON while
typing, and against the limits a schema must keep (chatapp/engine/structured/json_schema.py:
nesting, numbers, $refs), a note under it saying what is wrong; whether the grammar library
can use it is known when the answer starts, and said in one line there. Changes are announced
once typing pauses, as the system prompt's are: the panel writes its settings file on each.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QTimer, Signal, Slot
from PySide6.QtWidgets import QCheckBox, QVBoxLayout, QWidget

from chatapp.engine.structured.json_schema import ConstraintError, check_schema
from chatapp.gui.common.bounded_text import BoundedPlainTextEdit
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import warning_label

SAVE_AFTER_MS = 400
TIP = (
    "Constrain the answer to JSON: the model can only pick tokens that keep it valid. "
    "Leave the schema empty for any JSON object."
)


class JsonAnswerOption(QWidget):
    sig_changed = Signal()  # toggled, or the schema changed and typing paused

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.check = QCheckBox("JSON answer", self)
        self.check.setObjectName("jsonAnswerCheck")
        self.check.setToolTip(TIP)
        self.schema_edit = BoundedPlainTextEdit("the JSON schema", self)
        self.schema_edit.setObjectName("jsonSchemaEdit")
        self.schema_edit.setPlaceholderText("Empty: any JSON object. Or paste a JSON schema.")
        self.schema_edit.setAccessibleName("JSON schema of the answer")
        self.schema_edit.setMinimumHeight(44)
        self.schema_edit.setMaximumHeight(120)
        self.note = warning_label(self, "jsonSchemaNote")
        layout.addWidget(self.check)
        layout.addWidget(self.schema_edit)
        layout.addWidget(self.note)
        self._pending = QTimer(self)
        self._pending.setSingleShot(True)
        self._pending.setInterval(SAVE_AFTER_MS)
        self._pending.timeout.connect(self._announce)
        self.check.toggled.connect(self._on_toggled)
        self.schema_edit.textChanged.connect(self._on_text_changed)
        self.schema_edit.sig_refused.connect(self._show_note)
        self._on_toggled(False, announce=False)

    def schema_text(self) -> str | None:
        """None when the option is off; "" for any JSON object; else the schema's text."""
        return self.schema_edit.toPlainText() if self.check.isChecked() else None

    def set_state(self, enabled: bool, schema: str) -> None:
        """As restored from the settings: nothing to save."""
        self.check.blockSignals(True)
        self.check.setChecked(enabled)
        self.check.blockSignals(False)
        self.schema_edit.setPlainText(schema)
        self._pending.stop()
        self._on_toggled(enabled, announce=False)

    @Slot(bool)
    def _on_toggled(self, checked: bool, announce: bool = True) -> None:
        self.schema_edit.setVisible(checked)
        self._check_text()
        if announce:
            self._announce()

    @Slot()
    def _on_text_changed(self) -> None:
        self._check_text()
        self._pending.start()

    def _check_text(self) -> None:
        text = self.schema_edit.toPlainText()
        problem = ""
        if self.check.isChecked() and text.strip():
            try:
                value = json.loads(text)
            except ValueError as exc:
                problem = f"Not valid JSON yet: {exc}."
            except RecursionError:
                problem = "The JSON schema is nested too deeply."
            else:
                try:
                    check_schema(value)
                except ConstraintError as exc:
                    problem = str(exc)
        self._show_note(problem)

    @Slot(str)
    def _show_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))

    @Slot()
    def _announce(self) -> None:
        self._pending.stop()
        emit(self.sig_changed)
