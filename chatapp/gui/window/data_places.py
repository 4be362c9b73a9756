"""Help > Where is my data: the settings file, the chat history, the models and the logs, with
a button that opens the data folder."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QGuiApplication
from PySide6.QtWidgets import QMenu, QMessageBox, QWidget

from chatapp.datadir import ENV_VAR, data_dir, logs_dir, models_dir
from chatapp.gui.common.settings import settings_file
from chatapp.logs import LOG_FILE
from chatapp.store.history import default_history_path

TITLE = "Where is my data"


def data_places() -> list[tuple[str, Path]]:
    """What chatapp keeps, and where (CHATAPP_DATA_DIR moves all of it)."""
    return [
        ("Settings", settings_file()),
        ("Chat history", default_history_path()),
        ("Models", models_dir()),
        ("Log", logs_dir() / LOG_FILE),
    ]


def data_places_html() -> str:
    rows = "".join(
        f"<tr><td><b>{escape(name)}</b>&nbsp;&nbsp;</td><td>{escape(str(path))}</td></tr>"
        for name, path in data_places()
    )
    return (
        f"<p>chatapp keeps everything in its data folder, <b>{escape(str(data_dir()))}</b>. "
        f"Set {ENV_VAR} to use another folder (the settings then move with it).</p>"
        f"<table>{rows}</table>"
    )


def add_data_places_action(
    parent: QWidget, menu: QMenu, open_folder: Callable[[Path], object]
) -> QAction:
    """Add Help > Where is my data to `menu`; `open_folder` shows a folder (tests replace it)."""
    action = QAction(f"&{TITLE}", parent)
    action.setObjectName("dataPlacesAction")
    action.setStatusTip("The settings, chat history, models and log, and where they are")
    action.triggered.connect(lambda: show_data_places(parent, open_folder))
    menu.addAction(action)
    return action


def show_data_places(parent: QWidget, open_folder: Callable[[Path], object]) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.Information, TITLE, data_places_html(), parent=parent)
    box.setObjectName("dataPlacesDialog")
    box.setTextFormat(box.textFormat().RichText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)  # to copy a path
    open_button = box.addButton("Open data folder", QMessageBox.ButtonRole.ActionRole)
    box.addButton(QMessageBox.StandardButton.Close)
    open_button.clicked.connect(lambda: _open(parent, open_folder))
    box.open()
    return box


def _open(parent: QWidget, open_folder: Callable[[Path], object]) -> QMessageBox | None:
    folder = data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    if open_folder(folder):
        return None
    return show_unopened(parent, folder)


def show_unopened(parent: QWidget, folder: Path) -> QMessageBox:
    """The desktop opened no file manager (no xdg-open, say): the path to copy instead."""
    box = QMessageBox(
        QMessageBox.Icon.Information,
        TITLE,
        f"This desktop could not open a file manager (on Linux that needs xdg-open). The data "
        f"folder is:\n\n{folder}",
        parent=parent,
    )
    box.setObjectName("dataFolderUnopened")
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    copy = box.addButton("Copy path", QMessageBox.ButtonRole.ActionRole)
    copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(str(folder)))
    box.addButton(QMessageBox.StandardButton.Close)
    box.open()
    return box
