"""The history's SQLite file: opening it (creating, upgrading, moving a damaged one aside,
falling back to read-only), its transactions and its clock. `HistoryStore` (history.py) adds the
conversations on top.

Durability: every write is its own short transaction, committed before the method returns, so
a finished message survives the process being killed right after (see `schema.configure` for
why synchronous=NORMAL is enough). The GUI stores an answer only once it is finished, so a kill
mid-answer loses that unfinished answer and nothing else; the user message before it stays
(the conversation then ends with a user message: offer "regenerate").

Two running instances: both work, on the same file, safely. We chose this over "a second
instance brings the first to the front" because SQLite already gives it: WAL lets readers and
one writer run side by side, writes are short IMMEDIATE transactions (the write lock is taken up
front, so two writers queue on the busy timeout instead of failing at commit), positions are
computed inside the transaction, and ids are never reused. An instance does not see the other's
changes by itself: it re-reads when asked (`list_conversations()`, `load_conversation()`), and
`has_external_changes()` is a cheap way to know whether to (poll it on window activation or
a timer). When the other instance deleted a conversation, writes to it raise
`ConversationNotFoundError` with a message that says so.

Opening runs `PRAGMA quick_check` (about 75 ms for a 68 MB file) so a damaged file is found
at startup, where it can be moved aside, rather than in the middle of saving an answer.

Threads: a HistoryStore belongs to the thread that made it (sqlite3's check_same_thread); make
another one for another thread, they share the file like two instances do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self

from chatapp.store import schema
from chatapp.store.errors import (
    ReadOnlyStoreError,
    SchemaTooNewError,
    StoreError,
    is_corruption,
    is_read_only,
    wrap,
)
from chatapp.store.read_only import connect_read_only, unwritable_reason
from chatapp.store.recovery import Recovery, move_aside, problems_line, set_links_aside
from chatapp.store.rows import fold


class _Corrupt(Exception):
    """Damage found; `conn` is still open so the -wal can be saved before it closes."""

    def __init__(self, reason: str, conn: sqlite3.Connection) -> None:
        super().__init__(reason)
        self.reason = reason
        self.conn = conn


def wait_for_write_lock(path: Path, timeout_s: float) -> bool:
    """Wait, for at most `timeout_s`, until no other process holds the history's write lock;
    True when it came free (taken and given straight back). For a worker thread: the window's
    own writes then need not wait (session/history_failures.py)."""
    try:
        conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.Error:
        return False
    finally:
        conn.close()


class HistoryFile:
    """Open (creating, upgrading or, if damaged, replacing) the history at `path`.

    Raises `SchemaTooNewError` for a file from a newer chatapp (left untouched) and
    `StoreError` when the file cannot be opened at all (permissions, busy, ...). An existing
    file that cannot be written is opened read-only (`read_only`, `read_only_message()`; see
    `read_only`); `read_only=True` asks for that.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        clock: Callable[[], datetime] | None = None,
        migrations: Mapping[int, schema.Migration] = schema.MIGRATIONS,
        timeout_s: float = schema.BUSY_TIMEOUT_MS / 1000,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self._timeout_s = timeout_s
        self._clock = clock or (lambda: datetime.now(UTC))
        self._last_time: datetime | None = None
        self._migrations = migrations
        self.recovery: Recovery | None = None  # set when a damaged file was moved aside
        self.read_only_reason = "asked to open it read-only" if read_only else None
        if not read_only:
            try:  # never through a link: SQLite writes where it points
                self.recovery = set_links_aside(self.path)
            except OSError as exc:
                raise StoreError(
                    f"The chat history {self.path} is a link to another file, which chatapp "
                    f"does not write through, and it could not be moved aside: {exc.strerror}"
                ) from exc
        self.read_only_reason = self.read_only_reason or unwritable_reason(self.path)
        if self.read_only_reason is not None:
            self._open_read_only()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"Could not create the folder for {self.path}: {exc}") from exc
        try:
            self._conn, self.journal_mode = self._connect()
        except StoreError as exc:
            if not (self.path.is_file() and is_read_only(exc.__cause__)):
                raise
            self.read_only_reason = "it cannot be written"  # e.g. a read-only disk
            self._open_read_only()
            return
        except _Corrupt as exc:
            try:
                self.recovery = move_aside(self.path, exc.reason, close=exc.conn.close)
            except OSError as move_error:
                exc.conn.close()
                raise StoreError(
                    f"The chat history {self.path} is damaged ({exc.reason}) and could not be "
                    f"moved aside: {move_error}"
                ) from move_error
            try:
                self._conn, self.journal_mode = self._connect()
            except _Corrupt as again:  # a fresh file cannot be corrupt; if it is, stop here
                again.conn.close()
                raise StoreError(f"A new chat history at {self.path} failed: {again}") from None
        self._data_version = self._read_data_version()

    # --- opening ---------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return self.read_only_reason is not None

    def read_only_message(self) -> str:
        return (
            f"The chat history {self.path} is read-only ({self.read_only_reason}): its chats "
            "are shown, but new chats and changes are not saved. Make it writable, or set "
            "CHATAPP_DATA_DIR to another folder."
        )

    def _open_read_only(self) -> None:
        self._conn = connect_read_only(self.path, self._timeout_s, max(self._migrations))
        self.journal_mode = str(self._conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
        self._data_version = self._read_data_version()

    def _connect(self) -> tuple[sqlite3.Connection, str]:
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (IMMEDIATE for writes).
            conn = sqlite3.connect(self.path, timeout=self._timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise wrap(exc, self.path) from exc
        try:
            conn.create_function("chatapp_fold", 1, fold, deterministic=True)
            # Before any setting that writes: a newer file must stay byte for byte as it was.
            version = schema.user_version(conn)  # "file is not a database" shows up here
            if version > max(self._migrations):
                raise SchemaTooNewError(self.path, version, max(self._migrations))
            mode = schema.configure(conn, busy_timeout_ms=round(self._timeout_s * 1000))
            problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
            if problems != ["ok"]:
                raise _Corrupt(problems_line(problems), conn)
            schema.migrate(conn, self.path, self._migrations)
        except _Corrupt:
            raise
        except sqlite3.Error as exc:
            if is_corruption(exc):
                raise _Corrupt(str(exc), conn) from exc
            conn.close()
            raise wrap(exc, self.path) from exc
        except BaseException:
            conn.close()
            raise
        return conn, mode

    def close(self) -> None:
        """Close the connection; the last one to close folds the -wal file back in."""
        self._conn.close()

    def set_busy_timeout(self, seconds: float) -> None:
        """How long a write waits for another instance's lock before StoreBusyError. The
        window shortens it while retrying saves that failed, so that a history another
        process keeps locked does not freeze the window at every attempt."""
        try:
            self._conn.execute(f"PRAGMA busy_timeout={max(0, round(seconds * 1000))}")
        except sqlite3.Error as exc:
            raise wrap(exc, self.path) from exc

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transactions ----------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock up front, committed on success."""
        if self.read_only:
            raise ReadOnlyStoreError(self.read_only_message())
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise wrap(exc, self.path) from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: several SELECTs see one consistent snapshot."""
        conn = self._conn
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise wrap(exc, self.path) from exc

    def _now(self) -> datetime:
        # Strictly increasing within this store, so "most recent first" never ties on a coarse
        # clock (Windows: ~15 ms) and a message is never older than the one before it.
        now = self._clock().astimezone(UTC)
        if self._last_time is not None and now <= self._last_time:
            now = self._last_time + timedelta(microseconds=1)
        self._last_time = now
        return now

    def _read_data_version(self) -> int:
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    # --- two instances, diagnostics --------------------------------------------------------

    def has_external_changes(self) -> bool:
        """True once per batch of commits made by another connection (instance) since the
        last call: the hint to re-read the list. Our own writes never count (SQLite's
        `PRAGMA data_version` ignores the connection's own commits)."""
        current = self._read_data_version()
        changed = current != self._data_version
        self._data_version = current
        return changed

    def integrity_check(self) -> list[str]:
        """SQLite's full check; ["ok"] when healthy (slow on big files: not at startup)."""
        try:
            return [str(r[0]) for r in self._conn.execute("PRAGMA integrity_check")]
        except sqlite3.Error as exc:
            raise wrap(exc, self.path) from exc

    def diagnostics(self) -> dict[str, Any]:
        """Settings in effect, for an About box, a bug report and the tests."""

        def pragma(name: str) -> Any:
            return self._conn.execute(f"PRAGMA {name}").fetchone()[0]

        return {
            "path": str(self.path),
            "sqlite_version": sqlite3.sqlite_version,
            "schema_version": pragma("user_version"),
            "journal_mode": pragma("journal_mode"),
            "foreign_keys": bool(pragma("foreign_keys")),
            "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[pragma("synchronous")],
            "busy_timeout_ms": pragma("busy_timeout"),
        }
