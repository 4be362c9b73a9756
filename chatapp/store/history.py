"""Chat history in one SQLite file: conversations, their messages and each answer's figures.

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

Search: case-insensitive substring match (Unicode casefold, in Python) over titles and message
text. FTS5 is compiled into this Python's SQLite (3.40.1), and was considered, but not chosen:
- a database whose triggers reference an FTS5 table cannot be written at all by an SQLite built
  without FTS5 (another Python, a packaged build), and the schema would depend on the build;
- FTS5's default tokenizer finds words, not substrings ("bind" misses "IOBinding"); the
  trigram tokenizer finds substrings but not queries under 3 characters, and triples the size;
- a scan is fast enough for chat histories: 50 000 messages of ~1 000 characters (a 68 MB
  file) in about 0.25 s here, a typical history of a few MB in milliseconds. Run it off the
  keystroke (debounced). An FTS index later is one migration away.

Opening runs `PRAGMA quick_check` (about 75 ms for that 68 MB file) so a damaged file is found
at startup, where it can be moved aside, rather than in the middle of saving an answer.

Threads: a HistoryStore belongs to the thread that made it (sqlite3's check_same_thread); make
another one for another thread, they share the file like two instances do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from chatapp.datadir import data_dir
from chatapp.store import alternatives, export, schema
from chatapp.store.errors import (
    ConversationNotFoundError,
    MessageNotFoundError,
    ReadOnlyStoreError,
    SchemaTooNewError,
    StoreError,
    is_corruption,
    is_read_only,
    wrap,
)
from chatapp.store.models import (
    ConversationDraft,
    ConversationInfo,
    Figures,
    MessageDraft,
    Role,
    SearchHit,
    StoredConversation,
    StoredMessage,
    to_iso,
)
from chatapp.store.read_only import connect_read_only, unwritable_reason
from chatapp.store.recovery import Recovery, move_aside
from chatapp.store.rows import (
    CONVERSATION_COLUMNS,
    FIGURE_COLUMNS,
    MESSAGE_COLUMNS,
    check_draft,
    conversation_info,
    figure_values,
    fold,
    lastrowid,
    message_from_row,
    snippet,
)

DEFAULT_FILENAME = "history.sqlite3"
DEFAULT_TITLE = "New chat"


def default_history_path() -> Path:
    return data_dir() / DEFAULT_FILENAME


def open_default_store() -> HistoryStore:
    """The history in the user's data folder (`CHATAPP_DATA_DIR` overrides).

    Check `store.recovery` afterwards: if set, show `store.recovery.message()`.
    """
    return HistoryStore(default_history_path())


class _Corrupt(Exception):
    """Damage found; `conn` is still open so the -wal can be saved before it closes."""

    def __init__(self, reason: str, conn: sqlite3.Connection) -> None:
        super().__init__(reason)
        self.reason = reason
        self.conn = conn


class HistoryStore:
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
                raise _Corrupt("; ".join(problems[:3]), conn)
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

    def __enter__(self) -> HistoryStore:
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

    # --- conversations ---------------------------------------------------------------------

    def create_conversation(
        self, title: str = DEFAULT_TITLE, *, model: str | None = None, system_prompt: str = ""
    ) -> ConversationInfo:
        now = self._now()
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, created, updated, model, system_prompt) "
                "VALUES (?, ?, ?, ?, ?)",
                (title, to_iso(now), to_iso(now), model, system_prompt),
            )
            conv_id = lastrowid(cur)
        return ConversationInfo(conv_id, title, now, now, model, system_prompt, 0)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.update_conversation(conversation_id, title=title)

    def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
    ) -> None:
        """Change what is given (None: keep). Does not move it up the list."""
        changes = {"title": title, "model": model, "system_prompt": system_prompt}
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return
        assignments = ", ".join(f"{name} = ?" for name in changes)
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE conversations SET {assignments} WHERE id = ?",
                (*changes.values(), conversation_id),
            )
            if cur.rowcount == 0:
                raise ConversationNotFoundError(conversation_id)

    def delete_conversation(self, conversation_id: int) -> bool:
        """Delete it and (foreign key cascade) its messages; False if it was already gone."""
        with self._write() as conn:
            cur = conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            return cur.rowcount > 0

    def list_conversations(self) -> list[ConversationInfo]:
        """Most recently active first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations c "
                "ORDER BY c.updated DESC, c.id DESC"
            ).fetchall()
        return [conversation_info(row) for row in rows]

    def get_conversation(self, conversation_id: int) -> ConversationInfo:
        with self._read() as conn:
            return self._info(conn, conversation_id)

    def load_conversation(self, conversation_id: int) -> StoredConversation:
        """The conversation with all its messages in order."""
        with self._read() as conn:
            info = self._info(conn, conversation_id)
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? "
                "ORDER BY position",
                (conversation_id,),
            ).fetchall()
            others = alternatives.load(conn, conversation_id)
        messages = [message_from_row(row) for row in rows]
        return StoredConversation(info, alternatives.with_alternatives(messages, others))

    def _info(self, conn: sqlite3.Connection, conversation_id: int) -> ConversationInfo:
        row = conn.execute(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = ?",
            (conversation_id,),
        ).fetchone()
        if row is None:
            raise ConversationNotFoundError(conversation_id)
        return conversation_info(row)

    # --- messages --------------------------------------------------------------------------

    def append_message(
        self,
        conversation_id: int,
        role: Role,
        content: str,
        figures: Figures | None = None,
    ) -> StoredMessage:
        """Add a message at the end; committed (durable) when this returns."""
        draft = MessageDraft(role, content, figures)
        with self._write() as conn:
            self._check_conversation(conn, conversation_id)
            (message,) = self._insert(conn, conversation_id, [draft])
            self._touch(conn, conversation_id)
        return message

    def replace_after(
        self,
        message_id: int,
        messages: Sequence[MessageDraft] = (),
        *,
        new_content: str | None = None,
    ) -> list[StoredMessage]:
        """Edit-and-regenerate in one transaction: drop every message after `message_id`,
        optionally give that message `new_content`, then append `messages`.

        `replace_after(user_id, new_content=text)` edits a user message and cuts the rest;
        `replace_after(user_id, [answer])` swaps in a regenerated answer only once it exists,
        so the old answer survives if the app dies while the new one is being written.
        Returns the appended messages.
        """
        drafts = list(messages)
        with self._write() as conn:
            row = conn.execute(
                "SELECT conversation_id, position FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise MessageNotFoundError(message_id)
            conversation_id, position = int(row[0]), int(row[1])
            conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND position > ?",
                (conversation_id, position),
            )
            if new_content is not None:
                conn.execute(
                    "UPDATE messages SET content = ? WHERE id = ?", (new_content, message_id)
                )
            stored = self._insert(conn, conversation_id, drafts)
            self._touch(conn, conversation_id)
        return stored

    def select_alternative(self, message_id: int, version: int) -> None:
        """Show version `version` (0-based) of answer `message_id`: its text and figures become
        the message's, the one shown so far joins the others (store/alternatives.py)."""
        with self._write() as conn:
            alternatives.select(conn, message_id, version)

    def truncate_after(self, message_id: int) -> int:
        """Drop every message after `message_id`; returns how many went."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT conversation_id, position FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise MessageNotFoundError(message_id)
            cur = conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND position > ?",
                (int(row[0]), int(row[1])),
            )
            self._touch(conn, int(row[0]))
            return cur.rowcount

    def _check_conversation(self, conn: sqlite3.Connection, conversation_id: int) -> None:
        row = conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,))
        if row.fetchone() is None:
            raise ConversationNotFoundError(conversation_id)

    def _touch(self, conn: sqlite3.Connection, conversation_id: int) -> None:
        conn.execute(
            "UPDATE conversations SET updated = ? WHERE id = ?",
            (to_iso(self._now()), conversation_id),
        )

    def _insert(
        self, conn: sqlite3.Connection, conversation_id: int, drafts: Sequence[MessageDraft]
    ) -> list[StoredMessage]:
        """Append inside the caller's transaction (which also bumps `updated`)."""
        stored: list[StoredMessage] = []
        for draft in drafts:
            check_draft(draft)
            created = draft.created or self._now()
            figures = draft.figures if draft.figures and not draft.figures.is_empty() else None
            # Position computed under the write lock: two instances never pick the same one.
            cur = conn.execute(
                "INSERT INTO messages (conversation_id, position, role, content, created, "
                f"version, {', '.join(FIGURE_COLUMNS)}) "
                "SELECT ?, coalesce(max(position) + 1, 0), ?, ?, ?, ?, "
                f"{', '.join('?' for _ in FIGURE_COLUMNS)} "
                "FROM messages WHERE conversation_id = ?",
                (
                    conversation_id,
                    draft.role,
                    draft.content,
                    to_iso(created),
                    draft.version,
                    *figure_values(figures),
                    conversation_id,
                ),
            )
            message_id = lastrowid(cur)
            (position,) = conn.execute(
                "SELECT position FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            others = alternatives.insert(conn, message_id, draft.alternatives, self._now)
            stored.append(
                StoredMessage(
                    message_id,
                    conversation_id,
                    int(position),
                    draft.role,
                    draft.content,
                    created.astimezone(UTC),
                    figures,
                    others,
                    draft.version,
                )
            )
        return stored

    # --- search ----------------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 200) -> list[SearchHit]:
        """Titles and messages containing `query` (case-insensitive), most recent
        conversations first, then in message order; at most `limit` hits."""
        needle = fold(query.strip())
        if not needle:
            return []
        with self._read() as conn:
            title_rows = conn.execute(
                "SELECT id, title FROM conversations WHERE instr(chatapp_fold(title), ?) > 0 "
                "ORDER BY updated DESC, id DESC LIMIT ?",
                (needle, limit),
            ).fetchall()
            message_rows = conn.execute(
                "SELECT c.id, c.title, m.id, m.position, m.role, m.content "
                "FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                "WHERE instr(chatapp_fold(m.content), ?) > 0 "
                "ORDER BY c.updated DESC, c.id DESC, m.position LIMIT ?",
                (needle, limit),
            ).fetchall()
        hits = [
            SearchHit(int(r[0]), str(r[1]), None, None, None, snippet(r[1], needle))
            for r in title_rows
        ]
        hits += [
            SearchHit(
                int(r[0]),
                str(r[1]),
                int(r[2]),
                int(r[3]),
                cast(Role, r[4]),
                snippet(str(r[5]), needle),
            )
            for r in message_rows
        ]
        return hits[:limit]

    # --- export / import -------------------------------------------------------------------

    def export_markdown(self, conversation_id: int) -> str:
        return export.to_markdown(self.load_conversation(conversation_id))

    def export_json(self, conversation_id: int) -> str:
        return export.to_json(self.load_conversation(conversation_id))

    def import_json(self, data: str | bytes) -> StoredConversation:
        """Add an exported conversation as a new one; nothing is written if it is invalid."""
        draft = export.parse_json(data, now=self._clock())
        return self.add_conversation(draft)

    def import_file(self, path: Path | str) -> StoredConversation:
        return self.import_json(export.read_export_file(path))

    def add_conversation(self, draft: ConversationDraft) -> StoredConversation:
        """Store a whole conversation in one transaction (all or nothing).

        `updated` becomes now, so an imported conversation shows at the top of the list.
        """
        for message in draft.messages:
            check_draft(message)
        now = self._now()
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, created, updated, model, system_prompt) "
                "VALUES (?, ?, ?, ?, ?)",
                (draft.title, to_iso(draft.created), to_iso(now), draft.model, draft.system_prompt),
            )
            conv_id = lastrowid(cur)
            self._insert(conn, conv_id, draft.messages)
        return self.load_conversation(conv_id)

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
