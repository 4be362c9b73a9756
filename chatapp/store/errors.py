"""Errors of the history store: the GUI catches `StoreError` and shows `str(exc)`.

Every message is written for a person, not a developer: it says what happened and what to do.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# Primary SQLite result codes (the low byte of an extended code).
SQLITE_PERM = 3
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_CORRUPT = 11
SQLITE_CANTOPEN = 14
SQLITE_NOTADB = 26


class StoreError(Exception):
    """Anything the history store cannot do; `str()` is fit to show in a dialog."""


class SchemaTooNewError(StoreError):
    """The file was written by a newer chatapp; it is left exactly as it was."""

    def __init__(self, path: Path | str, found: int, supported: int) -> None:
        self.path = Path(path)
        self.found = found
        self.supported = supported
        super().__init__(
            f"The chat history {self.path} was written by a newer version of chatapp "
            f"(schema version {found}; this version understands up to {supported}). "
            "It was not changed. Update chatapp, or set CHATAPP_DATA_DIR to use another folder."
        )


class NotFoundError(StoreError):
    """A conversation or message id that is not (or no longer) in the database.

    With two instances on one file this is normal: the other one may have deleted it.
    """


class ConversationNotFoundError(NotFoundError):
    def __init__(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        super().__init__(
            f"Conversation {conversation_id} no longer exists (it may have been deleted in "
            "another chatapp window)."
        )


class MessageNotFoundError(NotFoundError):
    def __init__(self, message_id: int) -> None:
        self.message_id = message_id
        super().__init__(
            f"Message {message_id} no longer exists (it may have been deleted in another "
            "chatapp window)."
        )


class StoreBusyError(StoreError):
    """Another process held the write lock for longer than the busy timeout."""


class ReadOnlyStoreError(StoreError):
    """A write to a history that was opened read-only; nothing was changed."""


class StoreCorruptError(StoreError):
    """Damage found while running; the next start moves the file aside."""


class ImportFormatError(StoreError):
    """A JSON export that cannot be imported; nothing was written."""

    def __init__(self, problem: str, where: str = "") -> None:
        self.problem = problem
        self.where = where
        at = f" at {where}" if where else ""
        super().__init__(f"This is not a chatapp conversation export{at}: {problem}")


class ImportTooLargeError(StoreError):
    """A JSON export beyond the import limits (file size, message count); nothing was written."""


def primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    return None if code is None else int(code) & 0xFF


def is_corruption(exc: sqlite3.Error) -> bool:
    """Damage to the file itself, as opposed to locks, permissions or our own SQL."""
    return primary_code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB)


def is_read_only(exc: BaseException | None) -> bool:
    """A file or folder this process may read but not write (permissions, read-only disk)."""
    if isinstance(exc, sqlite3.Error):
        return primary_code(exc) in (SQLITE_PERM, SQLITE_READONLY, SQLITE_CANTOPEN)
    return isinstance(exc, PermissionError) or getattr(exc, "errno", None) == 30  # EROFS


def wrap(exc: sqlite3.Error, path: Path) -> StoreError:
    """Translate a sqlite3 error into the store's own, with a message a person can act on."""
    code = primary_code(exc)
    if code in (SQLITE_BUSY, SQLITE_LOCKED):
        return StoreBusyError(
            f"The chat history {path} is busy: another chatapp instance kept it locked. "
            "Try again in a moment."
        )
    if code in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return StoreCorruptError(
            f"The chat history {path} is damaged ({exc}). Restart chatapp: it will move the "
            "damaged file aside and start a new history."
        )
    return StoreError(f"The chat history {path} could not be used: {exc}")
