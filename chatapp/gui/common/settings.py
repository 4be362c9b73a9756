"""Where the app's QSettings live. `CHATAPP_SETTINGS` points them at an ini file (tests, or a
portable install); else, when `CHATAPP_DATA_DIR` moves the data, they live beside it (a fresh
data folder starts with fresh settings, and never adds to another run's recent models);
otherwise the platform's usual place for organization/app "chatapp"."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QSettings

from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.datadir import data_dir

SETTINGS_ENV = "CHATAPP_SETTINGS"
ORGANIZATION = "chatapp"
APPLICATION = "chatapp"
MAX_RECENT = 8
SETTINGS_FILE = "chatapp.ini"  # its name beside the data


def settings_path() -> Path | None:
    """The ini file chosen by the environment; None for the platform's usual place."""
    path = os.environ.get(SETTINGS_ENV)
    if path:
        return Path(path).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return data_dir() / SETTINGS_FILE
    return None


def open_settings() -> QSettings:
    path = settings_path()
    if path is not None:
        return QSettings(str(path), QSettings.Format.IniFormat)
    return QSettings(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION
    )


def settings_file() -> Path:
    """Where the settings are stored, for the user to read (Help > Where is my data)."""
    path = settings_path()
    if path is not None:
        return path
    return Path(open_settings().fileName())


def string_list(settings: QSettings, key: str) -> list[str]:
    """QSettings returns a str for one-element lists and None for empty ones from ini files."""
    value = settings.value(key, [])
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


def remember_recent(settings: QSettings, key: str, item: str) -> list[str]:
    items = [item] + [i for i in string_list(settings, key) if i != item]
    items = items[:MAX_RECENT]
    settings.setValue(key, items)
    return items
