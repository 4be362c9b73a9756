"""File > Get models…: search the Hugging Face Hub, see which GGUF files this computer can run,
download one (progress, cancel, resume) and open it (the conversion's own progress and plan).

Every request runs on a thread of its own and reports through Qt signals (queued to the GUI
thread); nothing here contacts the network until the user searches. The hub's logic is
chatapp/hub (no Qt)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal, Slot
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from chatapp.error_text import first_line
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import muted
from chatapp.hub.catalog import HubFile, RepoFiles, RepoHit, repo_files, search
from chatapp.hub.download import Download, DownloadProgress, downloaded_file
from chatapp.hub.errors import HubError, endpoint
from chatapp.hub.fit import Fit, fit
from chatapp.hub.probe import Shape, probe
from chatapp.units import fmt_bytes

FILE_COLUMNS = ("File", "Quant", "Size", "Runs here")
PROGRESS_STEPS = 1000


class _Replies(QObject):
    """What the worker threads report; the signals arrive on the GUI thread."""

    sig_found = Signal(object, object)  # the text searched, list[RepoHit]
    sig_listed = Signal(object)  # RepoFiles
    sig_probed = Signal(object, object)  # HubFile, Shape | None
    sig_progress = Signal(object)  # DownloadProgress
    sig_downloaded = Signal(object)  # Path
    sig_failed = Signal(str, str)  # what failed ("search", "list", "download"), one line


class GetModelsDialog(QDialog):
    """`sig_open(path)`: a downloaded GGUF to convert and open."""

    sig_open = Signal(object)

    def __init__(self, models: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("getModelsDialog")
        self.setWindowTitle("Get models")
        self.models = models
        self.listing: RepoFiles | None = None
        self.fits: dict[str, Fit] = {}
        self.shapes: dict[str, Shape | None] = {}
        self.download: Download | None = None
        self.downloaded: Path | None = None
        self.threads: list[threading.Thread] = []
        self.replies = _Replies(self)
        self.replies.sig_found.connect(self._on_found)
        self.replies.sig_listed.connect(self._on_listed)
        self.replies.sig_probed.connect(self._on_probed)
        self.replies.sig_progress.connect(self._on_progress)
        self.replies.sig_downloaded.connect(self._on_downloaded)
        self.replies.sig_failed.connect(self._on_failed)

        self.search_edit = QLineEdit(self)
        self.search_edit.setObjectName("hubSearchEdit")
        self.search_edit.setPlaceholderText(
            "Search the Hugging Face Hub, e.g. SmolLM2, Qwen3, Llama 3.2"
        )
        self.search_edit.returnPressed.connect(self.start_search)
        self.search_button = QPushButton("Search", self)
        self.search_button.setObjectName("hubSearchButton")
        self.search_button.clicked.connect(self.start_search)
        self.where_label = QLabel(f"From {endpoint()} · into {models}", self)
        self.where_label.setWordWrap(True)
        muted(self.where_label)

        self.repo_list = QListWidget(self)
        self.repo_list.setObjectName("hubRepoList")
        self.repo_list.currentItemChanged.connect(self._on_repo_chosen)
        self.file_table = QTableWidget(0, len(FILE_COLUMNS), self)
        self.file_table.setObjectName("hubFileTable")
        self.file_table.setHorizontalHeaderLabels(FILE_COLUMNS)
        self.file_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.file_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.file_table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.file_table.verticalHeader().hide()
        header = self.file_table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(FILE_COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.file_table.itemSelectionChanged.connect(self._on_file_chosen)
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(self.repo_list)
        splitter.addWidget(self.file_table)
        splitter.setSizes([330, 520])

        self.detail_label = QLabel("", self)
        self.detail_label.setObjectName("hubDetail")
        self.detail_label.setWordWrap(True)
        self.message_label = QLabel("", self)
        self.message_label.setObjectName("hubMessage")
        self.message_label.setWordWrap(True)
        self.progress_bar = QProgressBar(self)
        self.progress_bar.setObjectName("hubProgress")
        self.progress_bar.setRange(0, PROGRESS_STEPS)
        keep_place = self.progress_bar.sizePolicy()
        keep_place.setRetainSizeWhenHidden(True)  # the buttons stay where they are
        self.progress_bar.setSizePolicy(keep_place)
        self.progress_bar.hide()
        self.download_button = QPushButton("Download", self)
        self.download_button.setObjectName("hubDownloadButton")
        self.download_button.clicked.connect(self.start_download)
        self.cancel_button = QPushButton("Cancel download", self)
        self.cancel_button.setObjectName("hubCancelButton")
        self.cancel_button.clicked.connect(self.cancel_download)
        self.open_button = QPushButton("Open", self)
        self.open_button.setObjectName("hubOpenButton")
        self.open_button.clicked.connect(self._on_open)
        close_button = QPushButton("Close", self)
        close_button.clicked.connect(self.close)

        top = QHBoxLayout()
        top.addWidget(self.search_edit, 1)
        top.addWidget(self.search_button)
        buttons = QHBoxLayout()
        buttons.addWidget(self.progress_bar, 1)
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.cancel_button)
        buttons.addWidget(self.open_button)
        buttons.addWidget(close_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.where_label)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.detail_label)
        layout.addWidget(self.message_label)
        layout.addLayout(buttons)
        self.resize(860, 520)
        self._update_buttons()

    # ---- work on threads ----------------------------------------------------------------
    def _start(self, work: Callable[[], None]) -> None:
        thread = threading.Thread(target=work, name="chatapp-hub", daemon=True)
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()

    def _guarded(self, what: str, call: Callable[[], Any], reply: Callable[[Any], None]) -> None:
        """Run `call` (on a worker thread) and reply with its value or its one-line error."""
        try:
            value = call()
        except HubError as exc:
            self._reply(self.replies.sig_failed, what, str(exc))
            return
        except Exception as exc:  # a bug, still one line in the dialog
            line = f"unexpected {type(exc).__name__}: {first_line(exc)}"
            self._reply(self.replies.sig_failed, what, line)
            return
        with contextlib.suppress(RuntimeError):  # the dialog is gone: no one to tell
            reply(value)

    @staticmethod
    def _reply(signal: Any, *args: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the dialog was closed and deleted meanwhile
            emit(signal, *args)

    # ---- search -------------------------------------------------------------------------
    @Slot()
    def start_search(self) -> None:
        text = self.search_edit.text().strip()
        if not text:
            return
        self.message_label.setText(f"Searching for {text}…")
        self.search_button.setEnabled(False)
        self._start(
            lambda: self._guarded(
                "search",
                lambda: search(text),
                lambda hits: emit(self.replies.sig_found, text, hits),
            )
        )

    @Slot(object, object)
    def _on_found(self, text: str, hits: list[RepoHit]) -> None:
        self.search_button.setEnabled(True)
        self.repo_list.clear()
        for hit in hits:
            gated = "  (gated)" if hit.gated else ""
            item = QListWidgetItem(f"{hit.repo}{gated}")
            item.setData(Qt.ItemDataRole.UserRole, hit.repo)
            item.setToolTip(
                f"{hit.repo}: {hit.downloads or 0:,} downloads, updated {hit.last_modified}"
            )
            self.repo_list.addItem(item)
        self.message_label.setText(
            f"{len(hits)} repositories with GGUF files for {text}."
            if hits
            else f"No GGUF repositories found for {text}."
        )

    # ---- a repository's files -------------------------------------------------------------
    @Slot()
    def _on_repo_chosen(self) -> None:
        item = self.repo_list.currentItem()
        if item is None:
            return
        repo = str(item.data(Qt.ItemDataRole.UserRole))
        self.listing = None
        self.file_table.setRowCount(0)
        self.message_label.setText(f"Listing {repo}…")
        self._start(
            lambda: self._guarded(
                "list", lambda: repo_files(repo), lambda r: emit(self.replies.sig_listed, r)
            )
        )

    @Slot(object)
    def _on_listed(self, listing: RepoFiles) -> None:
        self.listing = listing
        self.fits = {f.name: fit(f, listing.architecture) for f in listing.files}
        self.message_label.setText(
            f"{listing.repo} at {listing.revision[:10]}: {len(listing.files)} GGUF files"
            + (f", architecture {listing.architecture}." if listing.architecture else ".")
        )
        self.file_table.setRowCount(len(listing.files))
        for row, file in enumerate(listing.files):
            self._fill_row(row, file)
        self._update_buttons()

    def _fill_row(self, row: int, file: HubFile) -> None:
        verdict = self.fits[file.name]
        parts = f" ({len(file.parts)} parts)" if file.is_split else ""
        cells = (
            file.name + parts,
            file.quant or "",
            fmt_bytes(file.size) if file.size is not None else "?",
            verdict.mark,
        )
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(verdict.why)
            item.setData(Qt.ItemDataRole.UserRole, file.name)
            if not verdict.usable:  # greyed, still selectable so that the reason shows
                item.setForeground(self.palette().color(self.palette().ColorRole.PlaceholderText))
            self.file_table.setItem(row, column, item)

    def selected_file(self) -> HubFile | None:
        rows = self.file_table.selectionModel().selectedRows()
        if self.listing is None or not rows:
            return None
        return self.listing.files[rows[0].row()]

    def select_file(self, name: str) -> bool:
        for row, file in enumerate(self.listing.files if self.listing else ()):
            if name in (file.name, file.local_name):
                self.file_table.selectRow(row)
                return True
        return False

    @Slot()
    def _on_file_chosen(self) -> None:
        file = self.selected_file()
        self._update_buttons()
        if file is None or self.listing is None:
            self.detail_label.setText("")
            return
        self.detail_label.setText(self.fits[file.name].why)
        if file.name not in self.shapes and not file.not_a_model:
            listing = self.listing
            self.shapes[file.name] = None  # asked once
            self._start(
                lambda: self._guarded(
                    "probe",
                    lambda: probe(listing.repo, file.name, listing.revision),
                    lambda shape: emit(self.replies.sig_probed, file, shape),
                )
            )

    @Slot(object, object)
    def _on_probed(self, file: HubFile, shape: Shape | None) -> None:
        if self.listing is None or shape is None or file not in self.listing.files:
            return
        self.shapes[file.name] = shape
        self.fits[file.name] = fit(file, self.listing.architecture, shape)
        self._fill_row(self.listing.files.index(file), file)
        if self.selected_file() == file:
            self.detail_label.setText(self.fits[file.name].why)
            self._update_buttons()

    # ---- download ------------------------------------------------------------------------
    def _kept_bytes(self, file: HubFile) -> int:
        if self.listing is None:
            return 0
        return Download(self.models, self.listing.repo, self.listing.revision, file).kept_bytes()

    @Slot()
    def start_download(self) -> None:
        file = self.selected_file()
        if file is None or self.listing is None or self.download is not None:
            return
        job = Download(
            self.models,
            self.listing.repo,
            self.listing.revision,
            file,
            lambda p: emit(self.replies.sig_progress, p),
        )
        self.download = job
        self.downloaded = None
        self.progress_bar.setValue(0)
        self.progress_bar.show()
        self.message_label.setText(f"Downloading {file.name}…")
        self._start(
            lambda: self._guarded(
                "download", job.run, lambda p: emit(self.replies.sig_downloaded, p)
            )
        )
        self._update_buttons()

    @Slot()
    def cancel_download(self) -> None:
        if self.download is not None:
            self.download.cancel()
            self.message_label.setText("Cancelling…")

    @Slot(object)
    def _on_progress(self, progress: DownloadProgress) -> None:
        if self.download is None:
            return
        self.progress_bar.setValue(int(progress.fraction * PROGRESS_STEPS))
        self.message_label.setText(f"Downloading {Path(progress.part).name}: {progress.line()}")

    @Slot(object)
    def _on_downloaded(self, path: Path) -> None:
        self.download = None
        self.downloaded = path
        self.progress_bar.setValue(PROGRESS_STEPS)
        self.message_label.setText(
            f"Downloaded and checked (sha256): {path.name}. Open converts it."
        )
        self._update_buttons()

    @Slot(str, str)
    def _on_failed(self, what: str, message: str) -> None:
        if what == "probe":
            return  # the estimate without the header stays: not worth a message
        if what == "download":
            self.download = None
            self.progress_bar.hide()
        if what == "search":
            self.search_button.setEnabled(True)
        self.message_label.setText(message)
        self._update_buttons()

    @Slot()
    def _on_open(self) -> None:
        file = self.selected_file()
        path = self.downloaded
        if path is None and file is not None and self.listing is not None:
            path = downloaded_file(self.models, self.listing.repo, file, self.listing.revision)
        if path is not None:
            emit(self.sig_open, path)
            self.close()

    def _update_buttons(self) -> None:
        file = self.selected_file()
        busy = self.download is not None
        done = (
            file is not None
            and self.listing is not None
            and downloaded_file(self.models, self.listing.repo, file, self.listing.revision)
            is not None
        )
        usable = file is not None and self.fits.get(file.name, Fit(False, "", "")).usable
        self.download_button.setEnabled(file is not None and usable and not busy and not done)
        kept = self._kept_bytes(file) if file is not None and not busy and not done else 0
        self.download_button.setText(f"Resume ({fmt_bytes(kept)} kept)" if kept else "Download")
        self.cancel_button.setEnabled(busy)
        self.open_button.setEnabled(not busy and (done or self.downloaded is not None))

    def stop(self) -> None:
        """Cancel a download in progress (its part stays for a resume); touches no widget, so
        the window's shutdown may call it after the dialog is gone."""
        if self.download is not None:
            self.download.cancel()

    def closeEvent(self, event: Any) -> None:
        self.stop()
        super().closeEvent(event)

    def wait_for_threads(self, timeout_s: float = 10.0) -> None:
        """Tests: the worker threads have ended."""
        for thread in self.threads:
            thread.join(timeout_s)
