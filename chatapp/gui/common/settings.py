"""Where the app's QSettings live. `CHATAPP_SETTINGS` points them at an ini file (tests, or a
portable install); else, when `CHATAPP_DATA_DIR` moves the data, they live beside it (a fresh
data folder starts with fresh settings, and never adds to another run's recent models);
otherwise the platform's usual place for organization/app "chatapp".

The settings file is input like any other (hand-edited, damaged, or written by another
version): every value is read back through the readers below, which check its type, range and
size and give the default for anything else, so a bad value never stops the window.

Writes. Qt writes the file through QSaveFile, which follows a link at the file's name and
writes where it points (a link planted at chatapp.ini overwrote its target). So the file must
be a plain file of its own or absent when opened and at every write: anything else is moved
aside (the link itself, never what it points to) with one line naming it, and while it cannot
be moved nothing is written (`SettingsGuard`)."""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, QSettings

from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.datadir import data_dir
from chatapp.safe_delete import not_plain
from chatapp.safe_delete import set_aside as move_aside

SETTINGS_ENV = "CHATAPP_SETTINGS"
ORGANIZATION = "chatapp"
APPLICATION = "chatapp"
MAX_RECENT = 8
MAX_PATH_CHARS = 4096  # PATH_MAX on Linux: longer is no folder
MAX_ITEM_CHARS = 4096  # an item of a remembered list (a folder, a server's address)
MAX_JSON_CHARS = 1 << 20  # a remembered table (load times, keys): far below this
SETTINGS_FILE = "chatapp.ini"  # its name beside the data


def settings_path() -> Path | None:
    """The ini file chosen by the environment; None for the platform's usual place."""
    path = os.environ.get(SETTINGS_ENV)
    if path:
        return Path(path).expanduser()
    if os.environ.get(DATA_DIR_ENV):
        return data_dir() / SETTINGS_FILE
    return None


log = logging.getLogger(__name__)
# One line each for the window (a settings file that was not a plain file, moved aside).
SETTINGS_NOTICES: list[str] = []


def open_settings() -> QSettings:
    """The app's settings, from a plain file (a link or anything else at its name is moved
    aside first, and again before every write)."""
    settings = _open()
    if settings_file_problem(Path(settings.fileName())):
        note = set_aside(Path(settings.fileName()))
        SETTINGS_NOTICES.append(note)
        settings = _open()  # nothing read through the link is kept
    SettingsGuard(settings)
    return settings


def _open() -> QSettings:
    path = settings_path()
    if path is not None:
        return QSettings(str(path), QSettings.Format.IniFormat)
    return QSettings(
        QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION
    )


def settings_file_problem(path: Path) -> str:
    """Why the settings may not be written at `path` ("" when it is a plain file or absent)."""
    return not_plain(path)


def set_aside(path: Path) -> str:
    """Move what is at `path` aside (a link is renamed, its target untouched); one line."""
    problem = settings_file_problem(path)
    try:
        aside = move_aside(path)
    except OSError as exc:
        line = (
            f"Settings are not saved this run: {path} {problem}, and it could not be moved "
            f"aside ({exc.strerror})."
        )
    else:
        line = f"The settings file {path} was moved aside to {aside.name}: {problem}."
    log.warning("%s", line)
    return line


class SettingsGuard(QObject):
    """Runs before each of QSettings' own writes (its UpdateRequest events): the file at its
    name must be plain, or is set aside; while it cannot be, the write is skipped."""

    def __init__(self, settings: QSettings) -> None:
        super().__init__(settings)
        self.settings = settings
        self.path = Path(settings.fileName())
        self.notify: Callable[[str], object] | None = None  # the window's one line
        settings.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        # True: no write this time; the values stay, for a later one.
        return event.type() == QEvent.Type.UpdateRequest and not self.may_write()

    def may_write(self) -> bool:
        if not settings_file_problem(self.path):
            return True
        line = set_aside(self.path)
        if self.notify is not None:
            self.notify(line)
        else:
            SETTINGS_NOTICES.append(line)
        return not settings_file_problem(self.path)


def sync_settings(settings: QSettings) -> None:
    """settings.sync() when its file may be written (see SettingsGuard)."""
    guard = settings.findChild(SettingsGuard)
    if guard is None or guard.may_write():
        settings.sync()


def settings_file() -> Path:
    """Where the settings are stored, for the user to read (Help > Where is my data)."""
    path = settings_path()
    if path is not None:
        return path
    return Path(open_settings().fileName())


def string_list(settings: QSettings, key: str, limit: int = MAX_RECENT) -> list[str]:
    """QSettings returns a str for one-element lists and None for empty ones from ini files;
    at most `limit` non-empty items of text, each at most MAX_ITEM_CHARS, without NUL."""
    value = settings.value(key, [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list | tuple):
        return []
    items = [v for v in value if isinstance(v, str) and 0 < len(v) <= MAX_ITEM_CHARS]
    return [v for v in items if "\0" not in v][:limit]


def read_int(settings: QSettings, key: str, default: int, low: int, high: int) -> int:
    """An integer from `low` to `high` (its text or a whole float), else `default`."""
    value = settings.value(key, default)
    if isinstance(value, str) and len(value) <= 32:
        try:
            value = float(value) if any(c in value for c in ".eEnN") else int(value)
        except ValueError:
            return default
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return default
    return value if low <= value <= high else default


def read_float(settings: QSettings, key: str, low: float, high: float) -> float | None:
    """A finite number from `low` to `high`, else None."""
    value = settings.value(key)
    if isinstance(value, str) and len(value) <= 64:
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and low <= number <= high else None


def read_text(settings: QSettings, key: str, default: str = "", max_chars: int = 256) -> str:
    """Text of at most `max_chars` characters, else `default`."""
    value = settings.value(key, default)
    return value if isinstance(value, str) and len(value) <= max_chars else default


def read_flag(settings: QSettings, key: str, default: bool) -> bool:
    value = settings.value(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "1", "yes"):
            return True
        if word in ("false", "0", "no"):
            return False
    return default


def read_folder(settings: QSettings, key: str) -> Path | None:
    """An absolute path that is a folder now, else None (a relative one would be taken from
    wherever the app was started)."""
    return existing_folder(read_text(settings, key, "", MAX_PATH_CHARS))


def existing_folder(text: str) -> Path | None:
    if not text or "\0" in text or len(text) > MAX_PATH_CHARS:
        return None
    path = Path(text).expanduser()
    try:
        return path if path.is_absolute() and path.is_dir() else None
    except OSError:  # a name too long, a loop of links, a folder that cannot be read
        return None


def read_json_object(settings: QSettings, key: str) -> dict[str, object]:
    """A JSON object kept as text ({} when absent, too big, too deep or not an object)."""
    raw = settings.value(key, "")
    if not isinstance(raw, str) or not raw or len(raw) > MAX_JSON_CHARS:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def remember_recent(settings: QSettings, key: str, item: str) -> list[str]:
    items = [item] + [i for i in string_list(settings, key) if i != item]
    items = items[:MAX_RECENT]
    settings.setValue(key, items)
    return items
