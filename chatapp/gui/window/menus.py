"""The window's menu bar: File (open a model folder or a GGUF, Models, recent models, new chat,
quit), View (chat, comparison, and the view options) and Help (log folder, where the data is,
About), with the handlers that only the menus reach."""

from __future__ import annotations

import platform
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import onnxruntime as ort
import PySide6
from PySide6.QtCore import QObject, Signal, Slot, qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMenu, QMenuBar, QMessageBox, QTabWidget

from chatapp import __version__
from chatapp.datadir import logs_dir, models_dir
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.settings import existing_folder, string_list
from chatapp.gui.window.data_places import add_data_places_action
from chatapp.gui.window.view_options import ViewOptions
from chatapp.logs import LOG_FILE

if TYPE_CHECKING:
    from PySide6.QtCore import QSettings

    from chatapp.gui.window.chat_face import ChatFace

RECENT_KEY = "models/recent"


class MenuHost(Protocol):
    """What the menus ask of the window (MainWindow is one): they never import it."""

    settings: QSettings
    tabs: QTabWidget
    chat: ChatFace  # once the chat is built (after the menus)
    open_folder: Callable[[Path], bool]

    def menuBar(self) -> QMenuBar: ...
    def close(self) -> bool: ...
    def new_chat(self) -> None: ...
    def open_model(
        self, folder: Path | str, device: str | None = None, onnx_file: str | None = None
    ) -> bool: ...
    def show_message(self, text: str, level: str = "error", *, cause: str = "") -> None: ...
    def dismiss_message(self, *, cause: str | None = None) -> int: ...
    def show_panes(self) -> None: ...


class WindowMenus(QObject):
    """Builds the menu bar of `window` and keeps its actions (the window enables them).
    Features add theirs with `add_menu` and `add_file_actions`, and answer the File menu's
    opening actions (the models feature: sig_open_folder, sig_open_gguf, models_action,
    get_models_action)."""

    sig_open_folder = Signal(object)  # Path: a folder the user chose
    sig_open_gguf = Signal(object)  # Path: a GGUF file the user chose

    def __init__(self, window: MenuHost) -> None:
        bar = self.bar = window.menuBar()
        self.top = bar.window()  # the window as a widget: what dialogs and actions hang on
        super().__init__(self.top)
        self.window = window
        file_menu = self.file_menu = bar.addMenu("&File")
        self.open_folder_action = self._action(
            "Open model &folder…", self._on_open_folder, QKeySequence.StandardKey.Open
        )
        self.open_gguf_action = self._action(
            "Open &GGUF…", self._on_open_gguf, QKeySequence("Ctrl+Shift+O")
        )
        self.models_action = self._action("&Models…")
        self.models_action.setStatusTip("The prepared models: size, source, precision; remove")
        self.get_models_action = self._action("&Get models…")
        self.get_models_action.setStatusTip(
            "Search the Hugging Face Hub for GGUF models, download one and open it"
        )
        file_menu.addActions(
            [
                self.open_folder_action,
                self.open_gguf_action,
                self.models_action,
                self.get_models_action,
            ]
        )
        self.recent_menu = file_menu.addMenu("&Recent models")
        self.recent_menu.aboutToShow.connect(self.rebuild_recent_menu)
        file_menu.addSeparator()
        self.new_chat_action = self._action(
            "&New chat", window.new_chat, QKeySequence.StandardKey.New
        )
        file_menu.addAction(self.new_chat_action)
        file_menu.addSeparator()
        file_menu.addAction(self._action("&Quit", window.close, QKeySequence.StandardKey.Quit))

        view_menu = self.view_menu = bar.addMenu("&View")
        self.show_chat_action = self._action(
            "&Chat", lambda: window.tabs.setCurrentIndex(0), QKeySequence("Ctrl+1")
        )
        view_menu.addAction(self.show_chat_action)
        self.view_options = ViewOptions(self.top, view_menu, window.settings, window.show_panes)
        self._views_end = view_menu.actions()[1]  # the options' separator: views go above it

        help_menu = self.help_menu = bar.addMenu("&Help")
        self.open_log_action = self._action("Open &log folder", self._on_open_log_folder)
        self.open_log_action.setStatusTip("The folder of chatapp.log: what went wrong, in detail")
        help_menu.addAction(self.open_log_action)
        self.data_places_action = add_data_places_action(
            self.top, help_menu, lambda folder: window.open_folder(folder)
        )
        help_menu.addAction(self._action("&About chatapp", self._on_about))
        self.rebuild_recent_menu()

    def _action(
        self,
        text: str,
        slot: object = None,
        shortcut: QKeySequence | QKeySequence.StandardKey | None = None,
    ) -> QAction:
        action = QAction(text, self.top)
        if shortcut is not None:
            action.setShortcut(shortcut)
        if slot is not None:
            action.triggered.connect(slot)
        return action

    # ---- what features add ---------------------------------------------------------------
    def add_menu(self, title: str) -> QMenu:
        """A menu of its own for a feature, before Help (where people look for it)."""
        menu = QMenu(title, self.top)
        self.bar.insertMenu(self.help_menu.menuAction(), menu)
        return menu

    def add_view_action(
        self, text: str, slot: object, shortcut: QKeySequence | None = None
    ) -> QAction:
        """View > `text` for a feature's tab (Compare loops), below Chat."""
        action = self._action(text, slot, shortcut)
        self.view_menu.insertAction(self._views_end, action)
        return action

    def add_file_actions(self, actions: list[QAction]) -> None:
        """A feature's actions in the File menu, above New chat, with a separator after them."""
        for action in actions:
            self.file_menu.insertAction(self.new_chat_action, action)
        self.file_menu.insertSeparator(self.new_chat_action)

    # ---- File -----------------------------------------------------------------------------
    @Slot()
    def _on_open_folder(self) -> None:
        window = self.window
        model_dir = window.chat.model_dir
        start = str(model_dir.parent if model_dir else models_dir())
        folder = QFileDialog.getExistingDirectory(self.top, "Open model folder", start)
        if folder:
            emit(self.sig_open_folder, Path(folder))

    @Slot()
    def _on_open_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.top,
            "Open GGUF model",
            str(Path.home()),
            "GGUF models (*.gguf);;All files (*)",
        )
        if path:
            emit(self.sig_open_gguf, Path(path))

    @Slot()
    def rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        recent = [p for p in string_list(self.window.settings, RECENT_KEY) if existing_folder(p)]
        for folder in recent:
            action = self.recent_menu.addAction(Path(folder).name)
            action.setToolTip(folder)
            action.setStatusTip(folder)
            action.triggered.connect(lambda _checked=False, f=folder: self.window.open_model(f))
        if not recent:
            self.recent_menu.addAction("(none yet)").setEnabled(False)

    # ---- Help -----------------------------------------------------------------------------
    @Slot()
    def _on_open_log_folder(self) -> None:
        folder = logs_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            self.window.show_message(
                f"Could not create the log folder {folder}: {exc}", "error", cause="log folder"
            )
            return
        if not self.window.open_folder(folder):
            line = f"Could not open {folder}; the log is {folder / LOG_FILE}."
            self.window.show_message(line, "info", cause="log folder")
        else:
            self.window.dismiss_message(cause="log folder")

    @Slot()
    def _on_about(self) -> None:
        QMessageBox.about(self.top, "About chatapp", about_text(self.window.chat))


def about_text(chat: ChatFace) -> str:
    """Help > About: the versions of chatapp, ONNX Runtime, Qt and Python, and the model."""
    rows = [
        ("chatapp", __version__),
        # Its version only: an installed provider may not run here (CUDA without a GPU); the
        # devices that do are the chat's row below.
        ("ONNX Runtime", ort.__version__),
        ("Qt", f"{qVersion()} (PySide6 {PySide6.__version__})"),
        ("Python", platform.python_version()),
    ]
    rows += chat.about_rows()
    table = "".join(
        f"<tr><td><b>{escape(k)}</b>&nbsp;&nbsp;</td><td>{escape(v)}</td></tr>" for k, v in rows
    )
    return (
        "<p>Chat with small language models on ONNX Runtime, and see what KV-cache "
        "handling costs: three loops, No cache, Naive and IO-Binding.</p>"
        f"<table>{table}</table>"
    )
