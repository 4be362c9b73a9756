"""Where an export dialog starts: the folder the user last exported into (from the chat, the
history or the comparison view, one shared setting), else the home folder. One helper so every
export button agrees."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from chatapp.gui.common.settings import read_folder

EXPORT_FOLDER_KEY = "export/last_folder"
_OLDER_KEY = "history/export_dir"  # where chat exports remembered it before this was shared


def export_folder(settings: QSettings) -> Path:
    """The folder to start an export or import dialog in: the last one used if it still
    exists, else home."""
    for key in (EXPORT_FOLDER_KEY, _OLDER_KEY):
        folder = read_folder(settings, key)
        if folder is not None:
            return folder
    return Path.home()


def remember_export_folder(settings: QSettings, target: Path) -> None:
    """Remember the folder of what was just written (`target` is a file or a folder)."""
    folder = target if target.is_dir() else target.parent
    settings.setValue(EXPORT_FOLDER_KEY, str(folder))
