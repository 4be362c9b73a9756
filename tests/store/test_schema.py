"""Schema version, forward migrations, refusing a newer file, connection settings."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from chatapp.store import HistoryStore, SchemaTooNewError, StoreError
from chatapp.store.models import Figures
from chatapp.store.schema import CURRENT_VERSION, MIGRATIONS, Migration, migrate
from tests.store.conftest import raw

NEXT = CURRENT_VERSION + 1  # a version a later chatapp might add


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def test_fresh_database_gets_current_version_and_tables(db_path: Path) -> None:
    HistoryStore(db_path).close()
    conn = raw(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == CURRENT_VERSION == 9
    assert {"conversations", "messages"} <= {
        r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    # Every figure has its own column.
    assert set(Figures.names()) <= set(_columns(conn, "messages"))
    assert _columns(conn, "conversations") == [
        "id",
        "title",
        "created",
        "updated",
        "model",
        "system_prompt",
        "settings",
    ]
    conn.close()


def test_a_version_3_history_gains_empty_chat_settings(db_path: Path) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    migrate(conn, db_path, {v: MIGRATIONS[v] for v in (1, 2, 3)})
    conn.execute(
        "INSERT INTO conversations (title, created, updated, model, system_prompt) "
        "VALUES ('old', '2026-01-01T00:00:00.000000+00:00', '2026-01-01T00:00:00.000000+00:00', "
        "'m', 'be brief')"
    )
    conn.close()
    store = HistoryStore(db_path)
    try:
        (info,) = store.list_conversations()
        assert (info.model, info.system_prompt, info.settings) == ("m", "be brief", "{}")
        store.update_conversation(info.id, settings='{"prompt_style": "continue"}')
        assert store.list_conversations()[0].settings == '{"prompt_style": "continue"}'
    finally:
        store.close()


def test_a_version_5_history_opens_and_keeps_the_variant_of_later_answers(
    db_path: Path,
) -> None:
    """Version 6 adds the variant (the graph that wrote an answer) in place: an answer from
    before has none, a later one keeps its own, in the shown version and the others."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    migrate(conn, db_path, {v: MIGRATIONS[v] for v in range(1, 6)})
    now = "2026-11-01T10:00:00+00:00"
    conn.execute("INSERT INTO conversations VALUES (1, 'before', ?, ?, 'm', '', '{}')", (now, now))
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created, model, "
        "precision) VALUES (1, 0, 'assistant', 'old', ?, 'm', 'fast')",
        (now,),
    )
    conn.close()
    with HistoryStore(db_path) as s:
        assert s.diagnostics()["schema_version"] == CURRENT_VERSION
        old = s.load_conversation(1).messages[0].figures
        assert old is not None and (old.model, old.precision, old.variant) == ("m", "fast", None)
        s.append_message(1, "assistant", "new", Figures(model="m", variant="model_gguf.onnx"))
        assert s.load_conversation(1).messages[1].figures.variant == "model_gguf.onnx"
    for table in ("messages", "alternatives"):
        assert "variant" in _columns(raw(db_path), table)


def test_settings_in_effect(store: HistoryStore, db_path: Path) -> None:
    d = store.diagnostics()
    assert d["journal_mode"] == "wal"
    assert d["foreign_keys"] is True
    assert d["synchronous"] == "NORMAL"
    assert d["busy_timeout_ms"] == 5000
    assert d["schema_version"] == CURRENT_VERSION
    # WAL is a property of the file: another connection sees it too.
    conn = raw(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def _add_seed(conn: sqlite3.Connection) -> None:
    conn.execute("ALTER TABLE messages ADD COLUMN seed INTEGER")
    conn.execute("UPDATE messages SET seed = 7")


def test_v1_database_migrates_to_the_current_version_keeping_figures(db_path: Path) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    migrate(conn, db_path, {1: MIGRATIONS[1]})  # a file written by the app before v2
    now = "2026-11-01T10:00:00+00:00"
    conn.execute("INSERT INTO conversations VALUES (1, 'before', ?, ?, NULL, '')", (now, now))
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created) "
        "VALUES (1, 0, 'user', 'hello', ?)",
        (now,),
    )
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created, mode, "
        "tokens_per_s) VALUES (1, 1, 'assistant', 'hi', ?, 'naive', 12.5)",
        (now,),
    )
    conn.close()
    with HistoryStore(db_path) as s:
        assert s.diagnostics()["schema_version"] == CURRENT_VERSION
        conv = s.load_conversation(1)
        figures = conv.messages[1].figures
        assert figures is not None and figures.tokens_per_s == 12.5
        assert figures.h2d_bytes_per_token is None  # unknown for answers made before v2
        s.append_message(conv.id, "assistant", "again", Figures(h2d_bytes_per_token=8.0))
        assert s.load_conversation(conv.id).messages[2].figures.h2d_bytes_per_token == 8.0


def test_current_database_migrates_forward_keeping_data(db_path: Path) -> None:
    with HistoryStore(db_path) as s:
        conv = s.create_conversation("before the next version")
        s.append_message(conv.id, "user", "hello")

    with HistoryStore(db_path, migrations={**MIGRATIONS, NEXT: _add_seed}) as s:
        assert s.diagnostics()["schema_version"] == NEXT
        loaded = s.load_conversation(conv.id)
        assert [m.content for m in loaded.messages] == ["hello"]

    conn = raw(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == NEXT
    assert conn.execute("SELECT seed FROM messages").fetchall() == [(7,)]
    conn.close()


def test_migrations_run_in_order_from_empty(tmp_path: Path) -> None:
    calls: list[int] = []

    def step(n: int) -> Migration:
        def run(conn: sqlite3.Connection) -> None:
            calls.append(n)
            conn.execute(f"CREATE TABLE t{n} (x)")

        return run

    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    assert migrate(conn, "x.db", {1: step(1), 2: step(2), 3: step(3)}) == (0, 3)
    assert calls == [1, 2, 3]
    assert migrate(conn, "x.db", {1: step(1), 2: step(2), 3: step(3)}) == (3, 3)
    assert calls == [1, 2, 3]  # nothing runs twice
    conn.close()


def test_failing_migration_changes_nothing(db_path: Path) -> None:
    HistoryStore(db_path).close()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        HistoryStore(db_path, migrations={**MIGRATIONS, NEXT: broken})
    conn = raw(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == CURRENT_VERSION
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in names
    conn.close()
    with HistoryStore(db_path) as s:  # and today's app still opens it
        assert s.list_conversations() == []


def test_migration_that_commits_on_its_own_is_caught(db_path: Path) -> None:
    HistoryStore(db_path).close()

    def sneaky(conn: sqlite3.Connection) -> None:
        conn.executescript("CREATE TABLE y (a);")  # commits the open transaction (3.11)

    with pytest.raises(StoreError, match="ended the transaction"):
        HistoryStore(db_path, migrations={**MIGRATIONS, NEXT: sneaky})
    conn = raw(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == CURRENT_VERSION
    conn.close()


def test_missing_migration_step_is_a_programming_error(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    with pytest.raises(ValueError, match=r"missing for versions \[2\]"):
        migrate(conn, "x.db", {1: MIGRATIONS[1], 3: MIGRATIONS[1]})
    conn.close()


def test_database_from_the_future_is_refused_and_untouched(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE conversations (id INTEGER PRIMARY KEY, future_column TEXT)")
    conn.execute("INSERT INTO conversations VALUES (1, 'from v9')")
    conn.execute(f"PRAGMA user_version = {CURRENT_VERSION + 8}")
    conn.commit()
    conn.close()
    before = hashlib.sha256(db_path.read_bytes()).hexdigest()
    files_before = sorted(p.name for p in db_path.parent.iterdir())

    with pytest.raises(SchemaTooNewError) as info:
        HistoryStore(db_path)
    assert info.value.found == CURRENT_VERSION + 8
    assert "newer version of chatapp" in str(info.value)
    assert "not changed" in str(info.value)
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before
    # Not mistaken for corruption: nothing moved aside, no WAL switched on.
    assert sorted(p.name for p in db_path.parent.iterdir()) == files_before
