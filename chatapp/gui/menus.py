"""The window's menu bar: File (open a model folder or a GGUF, Models, recent models, new chat,
quit), View (chat, comparison, and the view options) and Help (log folder, where the data is,
About), with the handlers that only the menus reach."""

from __future__ import annotations

import platform
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort
import PySide6
from PySide6.QtCore import QObject, Slot, qVersion
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMessageBox

from chatapp import __version__
from chatapp.datadir import logs_dir, models_dir
from chatapp.gui.common.settings import string_list
from chatapp.gui.data_places import add_data_places_action
from chatapp.gui.view_options import ViewOptions
from chatapp.logs import LOG_FILE

if TYPE_CHECKING:
    from chatapp.gui.chat.controller import ChatController
    from chatapp.gui.main_window import MainWindow

RECENT_KEY = "models/recent"


class WindowMenus(QObject):
    """Builds the menu bar of `window` and keeps its actions (the window enables them)."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        bar = window.menuBar()
        file_menu = self.file_menu = bar.addMenu("&File")
        self.open_folder_action = self._action(
            "Open model &folder…", self._on_open_folder, QKeySequence.StandardKey.Open
        )
        self.open_gguf_action = self._action(
            "Open &GGUF…", self._on_open_gguf, QKeySequence("Ctrl+Shift+O")
        )
        self.models_action = self._action("&Models…", window.show_models_dialog)
        self.models_action.setStatusTip("The prepared models: size, source, precision; remove")
        file_menu.addActions([self.open_folder_action, self.open_gguf_action, self.models_action])
        self.recent_menu = file_menu.addMenu("&Recent models")
        self.recent_menu.aboutToShow.connect(self.rebuild_recent_menu)
        file_menu.addSeparator()
        self.new_chat_action = self._action(
            "&New chat", window.new_chat, QKeySequence.StandardKey.New
        )
        file_menu.addAction(self.new_chat_action)
        file_menu.addSeparator()
        file_menu.addAction(self._action("&Quit", window.close, QKeySequence.StandardKey.Quit))

        view_menu = bar.addMenu("&View")
        self.show_chat_action = self._action(
            "&Chat", lambda: window.tabs.setCurrentIndex(0), QKeySequence("Ctrl+1")
        )
        self.compare_action = self._action(
            "C&ompare loops", window.show_compare_view, QKeySequence("Ctrl+2")
        )
        view_menu.addActions([self.show_chat_action, self.compare_action])
        self.view_options = ViewOptions(window, view_menu, window.settings)

        help_menu = bar.addMenu("&Help")
        self.open_log_action = self._action("Open &log folder", self._on_open_log_folder)
        self.open_log_action.setStatusTip("The folder of chatapp.log: what went wrong, in detail")
        help_menu.addAction(self.open_log_action)
        self.data_places_action = add_data_places_action(
            window, help_menu, lambda folder: window.open_folder(folder)
        )
        help_menu.addAction(self._action("&About chatapp", self._on_about))
        self.rebuild_recent_menu()

    def _action(
        self,
        text: str,
        slot: object,
        shortcut: QKeySequence | QKeySequence.StandardKey | None = None,
    ) -> QAction:
        action = QAction(text, self.window)
        if shortcut is not None:
            action.setShortcut(shortcut)
        action.triggered.connect(slot)
        return action

    # ---- File -----------------------------------------------------------------------------
    @Slot()
    def _on_open_folder(self) -> None:
        window = self.window
        start = str(window.model_dir.parent if window.model_dir else models_dir())
        folder = QFileDialog.getExistingDirectory(window, "Open model folder", start)
        if folder:
            window.open_model_folder(Path(folder))

    @Slot()
    def _on_open_gguf(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self.window,
            "Open GGUF model",
            str(Path.home()),
            "GGUF models (*.gguf);;All files (*)",
        )
        if path:
            self.window.convert_and_open(path)

    @Slot()
    def rebuild_recent_menu(self) -> None:
        self.recent_menu.clear()
        recent = [p for p in string_list(self.window.settings, RECENT_KEY) if Path(p).is_dir()]
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
            self.window.show_message(f"Could not create the log folder {folder}: {exc}", "error")
            return
        if not self.window.open_folder(folder):
            self.window.show_message(
                f"Could not open {folder}; the log is {folder / LOG_FILE}.", "info"
            )

    @Slot()
    def _on_about(self) -> None:
        QMessageBox.about(self.window, "About chatapp", about_text(self.window.controller))


def about_text(controller: ChatController) -> str:
    """Help > About: the versions of chatapp, ONNX Runtime, Qt and Python, and the model."""
    model = controller.model
    rows = [
        ("chatapp", __version__),
        ("ONNX Runtime", f"{ort.__version__} ({', '.join(ort.get_available_providers())})"),
        ("Qt", f"{qVersion()} (PySide6 {PySide6.__version__})"),
        ("Python", platform.python_version()),
    ]
    if controller.remote is not None:
        rows.append(("Server", controller.remote.description))
    if model is not None:
        rows += [
            ("Model", model.description),
            ("Folder", str(model.folder)),
            ("Device", model.device_label),
            ("Context allocated", str(model.max_context)),
        ]
    else:
        rows.append(("Model", "none loaded"))
    table = "".join(
        f"<tr><td><b>{escape(k)}</b>&nbsp;&nbsp;</td><td>{escape(v)}</td></tr>" for k, v in rows
    )
    return (
        "<p>Chat with small language models on ONNX Runtime, and see what KV-cache "
        "handling costs: the naive loop against the IO-Binding loop.</p>"
        f"<table>{table}</table>"
    )
