"""Which graph to open when a model folder holds several (model.onnx, model_fp16.onnx,
model_q4.onnx, model_gguf.onnx, ...). Each graph is read to learn its precision, about half a
second for a large one, so the reading runs as a job on the window's worker: the dialog says
"Reading…" with how far it got, then lists the graphs, most precise first, each with the kernels
that run it, and says in plain words what a variant is. The one selected is the graph running
now when the folder is the loaded one, else the one the folder opens with on this computer (its
GGUF kernels on the CPU, where they run): accepting it never switches kernels unasked. Closing
it stops the reading and opens nothing."""

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

from chatapp.engine.model_folder.read import GGUF, candidate_files
from chatapp.engine.model_folder.variants import Variant, default_graph_name
from chatapp.engine.native_kernels import library_isa
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.workers import JobError, JobHandle, JobRunner, YieldedBatch
from chatapp.session.model_jobs import GraphRead, variants_job

PATH_ROLE = Qt.ItemDataRole.UserRole
ISA_NAMES = {"avx2": "AVX2", "avx512vnni": "AVX-512 VNNI", "scalar": "scalar"}
WHAT_A_VARIANT_IS = (
    "A variant is the same model stored another way: at another precision (more precise "
    "answers a little better, smaller runs faster) or for other kernels, the code that does "
    "the arithmetic."
)


def kernels_of(variant: Variant) -> str:
    """Which kernels run a graph, as the window's model line names them."""
    if variant.precision != GGUF:
        return "ONNX Runtime kernels"
    isa = library_isa()
    return f"GGUF kernels, {ISA_NAMES.get(isa or '', isa or 'not built')}"


def variant_text(variant: Variant, default: bool, running: bool) -> str:
    """One row of the list: the file, precision and size, kernels, and which is which."""
    notes = ["running now"] if running else []
    if default:
        notes.append("opens by default here")
    tail = f" · {', '.join(notes)}" if notes else ""
    return f"{variant.label()} — {kernels_of(variant)}{tail}"


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

    def __init__(
        self,
        runner: JobRunner,
        folder: Path,
        parent: QWidget | None = None,
        running: str | None = None,
        on_cpu: bool = True,
    ) -> None:
        """`running`: the graph the window runs now, when `folder` is the loaded one."""
        super().__init__(parent)
        self.setObjectName("variantPicker")
        self.setWindowTitle("Choose a variant")
        self.folder = folder
        self.running = running
        self.default = default_graph_name(folder, on_cpu)  # file names only: nothing read
        self.variants: list[Variant] | None = None  # None while reading
        self.status_label = QLabel("Waiting for the current work to finish…", self)
        self.status_label.setObjectName("variantStatus")
        self.status_label.setWordWrap(True)
        self.bar = QProgressBar(self)
        self.bar.setRange(0, 0)
        self.bar.setTextVisible(False)
        self.list = QListWidget(self)
        self.list.setObjectName("variantList")
        self.list.setWordWrap(True)  # a row names file, precision, size, kernels and a note
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
        self.resize(640, 320)
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
        paths = [v.path for v in variants]
        keep = next((p for p in (self.running, self.default) if p in paths), paths[0])
        which = "the one running now" if keep == self.running else "what it opens with here"
        # "Most precise first" only says something where the precisions differ: a GGUF graph
        # holds the same weights as the stock graph converted beside it, for other kernels.
        stock = {v.precision for v in variants if v.precision != GGUF}
        order = (
            "most precise first"
            if len(stock) > 1
            else "the same weights laid out for other kernels or files"
        )
        self.status_label.setText(
            f"{self.folder.name} holds {len(variants)} variants of the model, {order}. "
            f"{WHAT_A_VARIANT_IS} Selected: {which}."
        )
        for variant in variants:
            text = variant_text(variant, variant.path == self.default, variant.path == self.running)
            item = QListWidgetItem(text, self.list)
            item.setData(PATH_ROLE, variant.path)
        self.list.setCurrentRow(paths.index(keep))
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
            chosen = self.chosen()
            # The folder's own default stays "the default": it follows the device chosen later.
            emit(self.sig_chosen, None if chosen == self.default else chosen)
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
