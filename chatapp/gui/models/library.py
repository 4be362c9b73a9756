"""File > Models: the prepared models (size on disk, source, precision), opened or removed
from one list. The variant picker is gui/models/variant_picker.py; the last model used and
the load times kept are gui/common/load_memory.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import muted
from chatapp.hub.provenance import origins_by_sha256
from chatapp.store.model_library import LibraryError, LibraryModel, list_library, remove_model
from chatapp.units import fmt_bytes

COLUMNS = ("Model", "Size on disk", "Source", "Precision")
FOLDER_ROLE = Qt.ItemDataRole.UserRole


# ---- File > Models ----------------------------------------------------------------------------
class ModelsDialog(QDialog):
    """The models folder as a table; Open loads the selected model, Remove deletes it."""

    sig_open = Signal(object)  # the folder to open

    def __init__(self, models: Path, in_use: Path | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelsDialog")
        self.setWindowTitle("Models")
        self.models = models
        self.in_use = in_use
        # Asks before deleting; tests replace it.
        self.confirm: Callable[[str], bool] = self._confirm
        self.entries: list[LibraryModel] = []
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setObjectName("modelsTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        self.table.itemDoubleClicked.connect(lambda _item: self._on_open())
        self.place_label = QLabel(f"In {models}", self)
        self.place_label.setWordWrap(True)
        muted(self.place_label)
        self.message_label = QLabel("", self)
        self.message_label.setObjectName("modelsMessage")
        self.message_label.setWordWrap(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        self.open_button = QPushButton("Open", self)
        self.open_button.setObjectName("modelsOpenButton")
        self.remove_button = QPushButton("Remove…", self)
        self.remove_button.setObjectName("modelsRemoveButton")
        buttons.addButton(self.open_button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.addButton(self.remove_button, QDialogButtonBox.ButtonRole.DestructiveRole)
        buttons.rejected.connect(self.reject)
        self.open_button.clicked.connect(self._on_open)
        self.remove_button.clicked.connect(self._on_remove)
        layout = QVBoxLayout(self)
        layout.addWidget(self.place_label)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.message_label)
        layout.addWidget(buttons)
        self.resize(780, 320)  # room for a hub repository's name as the source
        self.refresh()

    def refresh(self) -> None:
        self.entries = list_library(self.models)
        origins = origins_by_sha256(self.models)  # what came from the hub, by the GGUF's hash
        self.table.setRowCount(len(self.entries))
        for row, model in enumerate(self.entries):
            name = model.name + ("  (in use)" if self._is_in_use(model) else "")
            origin = origins.get((model.source_sha256 or "").lower())
            source = origin.line() if origin is not None else model.source
            cells = (name, fmt_bytes(model.size_bytes), source, model.precision)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                tip = text
                if column == 2 and origin is not None:
                    tip = origin.describe()
                item.setToolTip(str(model.folder) if column == 0 else tip)
                item.setData(FOLDER_ROLE, str(model.folder))
                self.table.setItem(row, column, item)
        if not self.entries:
            self.message_label.setText("No prepared models yet: open a GGUF file or a folder.")
        self._update_buttons()

    def selected(self) -> LibraryModel | None:
        rows = self.table.selectionModel().selectedRows()
        return self.entries[rows[0].row()] if rows else None

    def select(self, name: str) -> None:
        for row, model in enumerate(self.entries):
            if model.name == name:
                self.table.selectRow(row)

    def _is_in_use(self, model: LibraryModel) -> bool:
        return self.in_use is not None and model.folder.resolve() == self.in_use.resolve()

    @Slot()
    def _update_buttons(self) -> None:
        model = self.selected()
        self.open_button.setEnabled(model is not None)
        self.remove_button.setEnabled(model is not None and not self._is_in_use(model))
        if model is not None and self._is_in_use(model):
            self.remove_button.setToolTip("The model in use: open another one first")
        else:
            self.remove_button.setToolTip("Delete this model folder from the disk")

    @Slot()
    def _on_open(self) -> None:
        model = self.selected()
        if model is not None:
            emit(self.sig_open, model.folder)
            self.accept()

    @Slot()
    def _on_remove(self) -> None:
        model = self.selected()
        if model is None or self._is_in_use(model):
            return
        question = f"Delete {model.name} ({fmt_bytes(model.size_bytes)}) from the disk?"
        if not model.converted:
            question += " chatapp did not make this folder: everything in it is deleted."
        if not self.confirm(question):
            return
        try:
            remove_model(self.models, model.folder)
        except LibraryError as exc:
            self.message_label.setText(str(exc))
            return
        self.message_label.setText(f"Removed {model.name}.")
        self.refresh()

    def _confirm(self, question: str) -> bool:
        answer = QMessageBox.question(self, "Remove model", question)
        return answer == QMessageBox.StandardButton.Yes
