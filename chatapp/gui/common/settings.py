"""Where the app's QSettings live. `CHATAPP_SETTINGS` points them at an ini file (tests, or a
portable install); otherwise the platform's usual place for organization/app "chatapp"."""

from __future__ import annotations

import os

from PySide6.QtCore import QSettings

SETTINGS_ENV = "CHATAPP_SETTINGS"
ORGANIZATION = "chatapp"
APPLICATION = "chatapp"
MAX_RECENT = 8


def open_settings() -> QSettings:
    path = os.environ.get(SETTINGS_ENV)
    if path:
        return QSettings(os.path.expanduser(path), QSettings.Format.IniFormat)
    return QSettings(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION
    )


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
