"""Opening a history that cannot be written (a read-only folder, file or disk) for reading.

Before, such a history failed to open and the app ran without one, as if the chats were gone.
Now the store opens it with SQLite's `mode=ro` (and, when SQLite cannot even create its shared
memory file beside it, `immutable=1`), refuses every write with `ReadOnlyStoreError`, and says
so once: the chats stay visible. The file is never changed: no WAL switch, no migration, no
moving a damaged file aside.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from chatapp.store import schema
from chatapp.store.errors import SchemaTooNewError, StoreError
from chatapp.store.recovery import problems_line
from chatapp.store.rows import fold


def unwritable_reason(path: Path) -> str | None:
    """Why an existing history file cannot be written here, or None if it can."""
    if not path.is_file():
        return None
    if not os.access(path, os.W_OK):
        return "the file cannot be written"
    # SQLite writes its -wal/-shm/-journal files beside the history.
    if not os.access(path.parent, os.W_OK):
        return "its folder cannot be written"
    return None


def connect_read_only(path: Path, timeout_s: float, max_version: int) -> sqlite3.Connection:
    """A query-only connection to an existing history; StoreError when it cannot be read."""
    base = path.resolve().as_uri()
    last: sqlite3.Error | None = None
    for options in ("mode=ro", "mode=ro&immutable=1"):
        try:
            conn = sqlite3.connect(
                f"{base}?{options}", uri=True, timeout=timeout_s, isolation_level=None
            )
        except sqlite3.Error as exc:
            last = exc
            continue
        try:
            _check(conn, path, max_version)
        except sqlite3.Error as exc:
            conn.close()
            last = exc
            continue
        except BaseException:
            conn.close()
            raise
        return conn
    raise StoreError(f"The chat history {path} is read-only and could not be read: {last}")


def _check(conn: sqlite3.Connection, path: Path, max_version: int) -> None:
    conn.create_function("chatapp_fold", 1, fold, deterministic=True)
    version = schema.user_version(conn)
    if version > max_version:
        raise SchemaTooNewError(path, version, max_version)
    if version == 0:
        raise StoreError(f"The chat history {path} is empty and read-only: chats cannot be saved.")
    if version < max_version:
        raise StoreError(
            f"The chat history {path} is read-only and from an older chatapp (schema "
            f"version {version}); it cannot be upgraded where it is."
        )
    problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
    if problems != ["ok"]:
        raise StoreError(
            f"The chat history {path} is damaged ({problems_line(problems)}) and read-only, "
            "so it cannot be moved aside."
        )
    conn.execute("PRAGMA query_only=ON")
