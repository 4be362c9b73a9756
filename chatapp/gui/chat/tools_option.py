"""The sampling settings' Tools option: functions the model may call, loaded from a JSON file
(OpenAI's `tools` list, or a list of function objects), as `chatapp generate --tools` reads
them (session/tool_specs.py). "Tools: none" until a file is loaded; Clear takes them away.

The chat keeps its tools (session/chat_settings.py): opening it again brings them back. A call
the model makes ends its answer as a block of its own, the function's name and its arguments
(engine/tool_calls.call_markdown). A file that cannot be used changes nothing: the window's
banner says why, in one sentence (`sig_refused`).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.structured.tool_calls import Tool
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.wheel import ignore_wheel_unless_focused
from chatapp.session.tool_specs import ToolSpecError, tools_from_file

TIP = (
    "Functions the model may call, from a JSON file (OpenAI's tools list). A call ends the "
    "answer and shows the function's name and arguments; the window does not run it."
)
CHOICES = (
    ("auto", "Model decides", "The model answers in text or calls a tool, as it chooses."),
    ("required", "Must call one", "The answer is a call of one of the tools."),
)


class ToolsOption(QWidget):
    sig_changed = Signal()  # tools loaded or cleared, or the choice changed
    sig_refused = Signal(str)  # a file that could not be used: why, one sentence

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._tools: tuple[Tool, ...] = ()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.label = QLabel(self)
        self.label.setObjectName("toolsLabel")
        self.label.setWordWrap(True)
        self.label.setToolTip(TIP)
        layout.addWidget(self.label)
        row = QHBoxLayout()
        self.choice_box = QComboBox(self)
        self.choice_box.setObjectName("toolChoiceBox")
        for value, text, tip in CHOICES:
            self.choice_box.addItem(text, value)
            self.choice_box.setItemData(
                self.choice_box.count() - 1, tip, Qt.ItemDataRole.ToolTipRole
            )
        ignore_wheel_unless_focused(self.choice_box)
        self.load_button = QPushButton("Load…", self)
        self.load_button.setObjectName("loadToolsButton")
        self.load_button.setToolTip(TIP)
        self.clear_button = QPushButton("Clear", self)
        self.clear_button.setObjectName("clearToolsButton")
        # The buttons, then the choice under them: in one row they widened the side panel
        # beyond what an 800 px window holds beside the chat and the conversation list.
        row.addWidget(self.load_button)
        row.addWidget(self.clear_button)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(self.choice_box)
        self.load_button.clicked.connect(self._on_load_clicked)
        self.clear_button.clicked.connect(self._on_clear_clicked)
        self.choice_box.currentIndexChanged.connect(self._on_choice_changed)
        self._show()

    def tools(self) -> tuple[Tool, ...]:
        return self._tools

    def choice(self) -> str:
        return str(self.choice_box.currentData() or "auto")

    def set_state(self, tools: tuple[Tool, ...], choice: str) -> None:
        """As a chat opened again had them: nothing to announce."""
        self._tools = tools
        self.choice_box.blockSignals(True)
        index = self.choice_box.findData(choice)
        self.choice_box.setCurrentIndex(max(index, 0))
        self.choice_box.blockSignals(False)
        self._show()

    def load_file(self, path: Path) -> bool:
        """The tools `path` lists replace these; a file that cannot be used changes nothing
        and says why (sig_refused)."""
        try:
            tools = tools_from_file(path)
        except ToolSpecError as exc:
            emit(self.sig_refused, f"The tools were not loaded: {exc.message}")
            return False
        self._tools = tools
        self._show()
        emit(self.sig_changed)
        return True

    def _show(self) -> None:
        names = ", ".join(t.name for t in self._tools)
        self.label.setText(f"Tools: {names or 'none'}")
        lines = [f"{t.name}: {t.description}" if t.description else t.name for t in self._tools]
        self.label.setToolTip("\n".join(lines) if lines else TIP)
        self.choice_box.setEnabled(bool(self._tools))
        self.clear_button.setEnabled(bool(self._tools))

    @Slot()
    def _on_load_clicked(self) -> None:
        name, _filter = QFileDialog.getOpenFileName(
            self, "Load tools", "", "JSON files (*.json);;All files (*)"
        )
        if name:
            self.load_file(Path(name))

    @Slot()
    def _on_clear_clicked(self) -> None:
        self._tools = ()
        self._show()
        emit(self.sig_changed)

    @Slot(int)
    def _on_choice_changed(self, _index: int) -> None:
        emit(self.sig_changed)
