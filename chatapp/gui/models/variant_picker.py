"""Which graph to open when a model folder holds several (model.onnx, model_fp16.onnx,
model_q4.onnx, ...). Each graph is read to learn its precision, about half a second for a large
one, so the reading runs as a job on the window's worker: the dialog says "Reading…" with how
far it got, then lists the graphs, most precise first. Closing it stops the reading and opens
nothing."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.model_folder.variants import Variant, candidate_files
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.workers import JobError, JobHandle, JobRunner, YieldedBatch
from chatapp.session.model_jobs import GraphRead, variants_job

PATH_ROLE = Qt.ItemDataRole.UserRole


def has_choice(folder: Path) -> bool:
    """Whether `folder` holds several graphs (a listing of two folders, nothing read)."""
    try:
        return len(candidate_files(folder)) > 1
    except OSError:
        return False  # opening it says what is wrong


class VariantPicker(QDialog):
    """Reads the graphs of `folder` on `runner`'s worker and asks which to open.
    sig_chosen(path): the graph chosen (relative to the folder), or None for the folder's
    default when fewer than two could be listed; nothing when the dialog is closed."""

    sig_chosen = Signal(object)  # str | None

    def __init__(self, runner: JobRunner, folder: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("variantPicker")
        self.setWindowTitle("Choose a variant")
        self.folder = folder
        self.variants: list[Variant] | None = None  # None while reading
        self.status_label = QLabel("Waiting for the current work to finish…", self)
        self.status_label.setObjectName("variantStatus")
        self.status_label.setWordWrap(True)
        self.bar = QProgressBar(self)
        self.bar.setRange(0, 0)
        self.bar.setTextVisible(False)
        self.list = QListWidget(self)
        self.list.setObjectName("variantList")
        self.list.hide()
        self.list.itemDoubleClicked.connect(lambda _item: self.accept())
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel, self)
        self.open_button = QPushButton("Open", self)
        self.open_button.setObjectName("variantOpenButton")
        self.open_button.setEnabled(False)
        self.open_button.setDefault(True)
        buttons.addButton(self.open_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.status_label)
        layout.addWidget(self.bar)
        layout.addWidget(self.list, 1)
        layout.addWidget(buttons)
        self.resize(520, 300)
        self.handle: JobHandle | None = runner.submit(variants_job(folder))
        self.handle.sig_started.connect(self._on_started)
        self.handle.sig_yielded.connect(self._on_progress)
        self.handle.sig_finished.connect(self._on_read)
        self.handle.sig_errored.connect(self._on_failed)
        self.handle.sig_aborted.connect(self._on_aborted)

    @property
    def reading(self) -> bool:
        return self.handle is not None

    @Slot()
    def _on_started(self) -> None:
        self.status_label.setText(f"Reading the graphs in {self.folder.name}…")

    @Slot(object)
    def _on_progress(self, batch: YieldedBatch) -> None:
        reads = [item for item in batch.items if isinstance(item, GraphRead)]
        if reads:
            last = reads[-1]
            self.bar.setRange(0, last.total)
            self.bar.setValue(last.done)
            self.status_label.setText(
                f"Reading the graphs in {self.folder.name}… "
                f"{last.done + 1} of {last.total}: {last.name}"
            )

    @Slot(object)
    def _on_read(self, variants: list[Variant]) -> None:
        self._forget_job()
        self.variants = variants
        if len(variants) < 2:  # nothing to choose: the folder's default
            emit(self.sig_chosen, None)
            self.accept()
            return
        self.bar.hide()
        self.status_label.setText(
            f"{self.folder.name} holds {len(variants)} ONNX graphs; the first is the most precise:"
        )
        for variant in variants:
            item = QListWidgetItem(variant.label(), self.list)
            item.setData(PATH_ROLE, variant.path)
        self.list.setCurrentRow(0)
        self.list.show()
        self.open_button.setEnabled(True)
        self.list.setFocus()

    @Slot(object)
    def _on_failed(self, error: JobError) -> None:
        # The reading itself failed: open the default, whose load says what is wrong.
        self._forget_job()
        emit(self.sig_chosen, None)
        self.accept()

    @Slot(str)
    def _on_aborted(self, _message: str) -> None:
        self._forget_job()
        self.reject()

    def chosen(self) -> str | None:
        item = self.list.currentItem()
        return str(item.data(PATH_ROLE)) if item is not None else None

    def done(self, result: int) -> None:
        """Accept, Cancel, Esc and the close button all end here."""
        if self.reading:
            self._forget_job(stop=True)  # the worker stops between two graphs
        elif result == QDialog.DialogCode.Accepted and self.variants and len(self.variants) > 1:
            emit(self.sig_chosen, self.chosen())
        super().done(result)

    def _forget_job(self, stop: bool = False) -> None:
        handle, self.handle = self.handle, None
        if handle is None:
            return
        if stop:
            handle.stop()
        for signal in (
            handle.sig_started,
            handle.sig_yielded,
            handle.sig_finished,
            handle.sig_errored,
            handle.sig_aborted,
        ):
            signal.disconnect()
