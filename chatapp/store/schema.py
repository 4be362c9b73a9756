"""The history schema and its forward migrations, keyed by `PRAGMA user_version`.

`MIGRATIONS[n]` turns a version n-1 database into version n; version 0 is an empty file.

A figure's column comes from the figures record (chatapp/engine/figures.py): a field with
`since=N` is added by version N's migration, to each table in FIGURE_TABLES (answers and
their other versions), nothing to write here. Any other change to the
schema is one function in STRUCTURE:

    def _v4(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE INDEX messages_by_created ON messages (created)")

    STRUCTURE = {1: _v1, 3: _v3, 4: _v4}

All pending steps run in one IMMEDIATE transaction together with the `user_version` bump, so a
crash or error mid-way leaves the file at its old version, and two instances starting at once
cannot both migrate. Foreign keys are off during the steps (SQLite cannot switch them inside a
transaction, and a table rebuild needs them off) and checked with `foreign_key_check` before
the commit. A file with a higher version than we know is never touched: `SchemaTooNewError`.

Only long-standing SQLite features are used (no STRICT tables, no generated columns): an older
SQLite in another build of the app would call a newer feature "malformed schema", which looks
exactly like corruption and would get the file moved aside.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path

from chatapp.engine.figures import FIGURES
from chatapp.store.errors import SchemaTooNewError, StoreError

Migration = Callable[[sqlite3.Connection], None]

BUSY_TIMEOUT_MS = 5000


def _v1(conn: sqlite3.Connection) -> None:
    # AUTOINCREMENT: ids are never reused. Another instance may still show a conversation we
    # delete; a reused id would send its next message into someone else's conversation.
    # Times are ISO 8601 UTC text with microseconds ("2026-11-03T12:00:00.000000+00:00"):
    # readable in the sqlite3 shell and ordered correctly as text.
    # Figures are columns rather than one JSON column: a fixed, small set of typed values that
    # SQL can filter and aggregate (median tokens/s per loop and device across the history),
    # NULL for user messages; a new figure is one ALTER TABLE in a migration.
    for statement in _V1_STATEMENTS:
        conn.execute(statement)


# Separate statements, not executescript(): on Python 3.11 executescript() commits the open
# transaction first, which would break the all-or-nothing upgrade.
_V1_STATEMENTS = (
    """
        CREATE TABLE conversations (
            id            INTEGER PRIMARY KEY AUTOINCREMENT,
            title         TEXT NOT NULL,
            created       TEXT NOT NULL,
            updated       TEXT NOT NULL,
            model         TEXT,
            system_prompt TEXT NOT NULL DEFAULT ''
        )
    """,
    "CREATE INDEX conversations_by_updated ON conversations (updated DESC, id DESC)",
    """
        CREATE TABLE messages (
            id                INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id   INTEGER NOT NULL
                              REFERENCES conversations (id) ON DELETE CASCADE,
            position          INTEGER NOT NULL CHECK (position >= 0),
            role              TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            content           TEXT NOT NULL,
            created           TEXT NOT NULL,
            -- figures of an assistant answer; NULL when unknown or for user messages
            model             TEXT,
            device            TEXT,
            mode              TEXT,
            tokens_per_s      REAL,
            ttft_s            REAL,
            perplexity        REAL,
            prompt_perplexity REAL,
            prompt_tokens     INTEGER,
            reused_tokens     INTEGER,
            generated_tokens  INTEGER,
            context_length    INTEGER,
            finish_reason     TEXT,
            -- also the index the foreign key and the ordered load use
            UNIQUE (conversation_id, position)
        )
    """,
)


ALTERNATIVES_SINCE = 3


def _v3(conn: sqlite3.Connection) -> None:
    # Regenerate keeps the earlier answers (store/alternatives.py): an answer's row in
    # `messages` holds the version shown, `alternatives` the others in order, and `version`
    # where the shown one sits among them all. Its figure columns are the record's as of this
    # version; later figures get a column here too (`_version`).
    conn.execute(
        "ALTER TABLE messages ADD COLUMN version INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0)"
    )
    figures = ", ".join(f"{f.name} {f.sql_type}" for f in FIGURES if f.since <= ALTERNATIVES_SINCE)
    conn.execute(
        f"""
        CREATE TABLE alternatives (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            message_id  INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
            ordinal     INTEGER NOT NULL CHECK (ordinal >= 0),
            content     TEXT NOT NULL,
            created     TEXT NOT NULL,
            {figures},
            UNIQUE (message_id, ordinal)
        )
        """
    )


CHAT_SETTINGS_SINCE = 4


def _v4(conn: sqlite3.Connection) -> None:
    # Per-chat settings (sampling, prompt style, stop strings) as one JSON object that the
    # session reads and writes (session/chat_settings.py); "{}" for the chats from before.
    conn.execute("ALTER TABLE conversations ADD COLUMN settings TEXT NOT NULL DEFAULT '{}'")


TOOL_MESSAGES_SINCE = 8
_OLD_ROLES = "CHECK (role IN ('user', 'assistant'))"


def _v8(conn: sqlite3.Connection) -> None:
    # Tool calls stay structured: an answer's calls as JSON text ([{"id", "name", "arguments"}],
    # store/tool_fields.py; NULL: none), and a tool's result as a message of role 'tool' with
    # the call it answers. SQLite cannot change a CHECK, so `messages` is rebuilt the way its
    # documentation says (create, copy, drop, rename; foreign keys are off in a migration):
    # from its own CREATE text, which holds every column added since version 1.
    (sql,) = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
    ).fetchone()
    if str(sql).count(_OLD_ROLES) != 1 or not str(sql).startswith("CREATE TABLE messages"):
        raise StoreError("The chat history's messages table is not one this chatapp wrote.")
    roles = "CHECK (role IN ('user', 'assistant', 'tool'))"
    new = str(sql).replace(_OLD_ROLES, roles).replace("CREATE TABLE messages", "CREATE TABLE m8", 1)
    # AUTOINCREMENT's high mark: ids of deleted messages stay unused (see _v1).
    seq = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchone()
    conn.execute(new)
    conn.execute("INSERT INTO m8 SELECT * FROM messages")
    conn.execute("DROP TABLE messages")
    conn.execute("ALTER TABLE m8 RENAME TO messages")
    (top,) = conn.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()
    conn.execute("DELETE FROM sqlite_sequence WHERE name = 'messages'")
    high = max(int(top), int(seq[0]) if seq is not None else 0)
    conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (high,))
    for column in ("tool_calls", "tool_call_id", "tool_name"):
        conn.execute(f"ALTER TABLE messages ADD COLUMN {column} TEXT")
    conn.execute("ALTER TABLE alternatives ADD COLUMN tool_calls TEXT")


# Version 1 lists its figure columns itself: it is history, whatever the record becomes.
# (tests/store/test_schema.py checks it against the record's `since=1` fields.)
STRUCTURE: dict[int, Migration] = {
    1: _v1,
    ALTERNATIVES_SINCE: _v3,
    CHAT_SETTINGS_SINCE: _v4,
    TOOL_MESSAGES_SINCE: _v8,
}
# Tables with one column per figure, and the version that created each with the record's
# figures of that time: a figure added later gets an ALTER TABLE in each.
FIGURE_TABLES = {"messages": 1, "alternatives": ALTERNATIVES_SINCE}


def _version(number: int) -> Migration:
    """Version `number`: its structural step, then the columns of the figures added in it."""

    def step(conn: sqlite3.Connection) -> None:
        if number in STRUCTURE:
            STRUCTURE[number](conn)
        for table, created in FIGURE_TABLES.items():
            if number <= created:
                continue
            for figure in FIGURES:
                if figure.since == number:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {figure.name} {figure.sql_type}")

    return step


CURRENT_VERSION = max(*STRUCTURE, *(f.since for f in FIGURES))
MIGRATIONS: dict[int, Migration] = {v: _version(v) for v in range(1, CURRENT_VERSION + 1)}


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def configure(conn: sqlite3.Connection, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> str:
    """Per-connection settings; returns the journal mode actually in effect.

    WAL: readers never block the writer and vice versa, so a second instance (or a search)
    does not stall an answer being saved; a commit is one append to the -wal file.
    synchronous=NORMAL: in WAL mode this never corrupts the file and keeps every commit across
    a crash or kill of the process (the kill test checks it); only a power loss or OS crash
    can roll back the last few commits. FULL would add an fsync per message on the GUI thread,
    which on slow, encrypted or network home folders costs tens of milliseconds.
    Where WAL is unavailable (some network file systems) we stay in rollback-journal mode,
    where NORMAL could corrupt on power loss, so FULL is used there.
    """
    mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA synchronous={'NORMAL' if mode == 'wal' else 'FULL'}")
    # Wait (rather than fail at once) while another instance holds the write lock.
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    return mode


def migrate(
    conn: sqlite3.Connection,
    path: Path | str,
    migrations: Mapping[int, Migration] = MIGRATIONS,
) -> tuple[int, int]:
    """Bring the database up to `max(migrations)`; returns (version before, version after).

    `conn` must be in autocommit mode (isolation_level=None).
    """
    target = max(migrations)
    missing = [v for v in range(1, target + 1) if v not in migrations]
    if missing:
        raise ValueError(f"migrations are missing for versions {missing}")
    before = user_version(conn)
    if before > target:
        raise SchemaTooNewError(path, before, target)
    if before == target:
        return before, target

    fk_on = bool(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    conn.execute("PRAGMA foreign_keys=OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another instance may have migrated meanwhile.
            before = user_version(conn)
            if before > target:
                raise SchemaTooNewError(path, before, target)
            for version in range(before + 1, target + 1):
                migrations[version](conn)
                if not conn.in_transaction:  # e.g. a step used executescript()
                    raise StoreError(f"migration to version {version} ended the transaction")
                if conn.execute("PRAGMA foreign_key_check").fetchone() is not None:
                    raise StoreError(
                        f"Upgrading the chat history {path} to version {version} broke a "
                        "foreign key; nothing was changed."
                    )
                conn.execute(f"PRAGMA user_version={int(version)}")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        if fk_on:
            conn.execute("PRAGMA foreign_keys=ON")
    return before, target
