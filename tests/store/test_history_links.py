"""The history database is one of the app's own files (issue 48): SQLite writes where a link
at its name points, so a link there, or at its -wal/-shm/-journal names, is moved aside (the
link itself, never its target) and a fresh history started, with one message naming it."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import sys
from pathlib import Path

import pytest

from chatapp.store import HistoryStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="links: POSIX")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def users_history(tmp_path: Path) -> Path:
    """Another history (a user's own, elsewhere) with one chat, closed."""
    other = tmp_path / "elsewhere" / "other.sqlite3"
    other.parent.mkdir()
    with HistoryStore(other) as store:
        store.create_conversation("The user's own")
    return other


def write_some(store: HistoryStore) -> None:
    conv = store.create_conversation("Ducks")
    store.append_message(conv.id, "user", "Why do ducks float?")


@pytest.mark.parametrize("target", ["a history", "a text file", "nothing (dangling)"])
def test_a_link_at_the_historys_name_is_moved_aside_and_a_fresh_history_started(
    tmp_path: Path, target: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "data" / "history.sqlite3"
    path.parent.mkdir()
    if target == "a history":
        pointed = users_history(tmp_path)
    elif target == "a text file":
        pointed = tmp_path / "notes.txt"
        pointed.write_text("the user's own notes\n")
    else:
        pointed = tmp_path / "not-yet"
    before = digest(pointed) if pointed.exists() else None
    path.symlink_to(pointed)
    with caplog.at_level(logging.WARNING), HistoryStore(path) as store:
        assert store.recovery is not None and store.recovery.link
        message = store.recovery.message()
        assert str(path) in message and "link" in message and "\n" not in message
        assert store.list_conversations() == []  # a fresh history, not the one linked
        write_some(store)
    assert path.is_file() and not path.is_symlink()
    (aside,) = [p for p in path.parent.iterdir() if ".not-a-file-" in p.name]
    assert aside.is_symlink() and aside.readlink() == pointed  # the link itself, kept
    assert (digest(pointed) if pointed.exists() else None) == before
    assert str(path) in caplog.text
    with HistoryStore(path) as again:  # the next start: the same fresh history, no message
        assert again.recovery is None
        assert [c.title for c in again.list_conversations()] == ["Ducks"]


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
def test_a_link_at_a_companions_name_is_moved_aside_never_written_through(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / "history.sqlite3"
    with HistoryStore(path) as store:
        write_some(store)
    target = tmp_path / "users-file"
    target.write_bytes(b"the user's own bytes\n" * 100)
    before = digest(target)
    Path(f"{path}{suffix}").symlink_to(target)
    with HistoryStore(path) as store:
        assert store.recovery is None  # the history itself is whole
        assert [c.title for c in store.list_conversations()] == ["Ducks"]
        write_some(store)
        if suffix == "-journal":  # the rollback journal's turn too
            store._conn.execute("PRAGMA journal_mode=DELETE")
            write_some(store)
    assert digest(target) == before
    assert [p.name for p in tmp_path.iterdir() if ".not-a-file-" in p.name]
    with HistoryStore(path) as store:
        assert len(store.list_conversations()) == (3 if suffix == "-journal" else 2)


def test_a_companion_beside_a_linked_history_goes_aside_with_it(tmp_path: Path) -> None:
    """A -wal left beside the link is not the fresh history's: it is never replayed into it."""
    path = tmp_path / "history.sqlite3"
    pointed = users_history(tmp_path)
    path.symlink_to(pointed)
    Path(f"{path}-wal").write_bytes(b"\0" * 4096)
    with HistoryStore(path) as store:
        assert store.recovery is not None
        assert [p.name for p in store.recovery.moved_files][1:] == [
            f"{store.recovery.moved_to.name}-wal"
        ]
        assert store.list_conversations() == []
    sqlite3.connect(pointed).close()


def test_a_read_only_opening_moves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite3"
    path.symlink_to(users_history(tmp_path))
    with HistoryStore(path, read_only=True) as store:
        assert store.recovery is None
    assert path.is_symlink()


def test_the_window_is_told_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chatapp.session.history_records import open_history

    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "history.sqlite3").symlink_to(users_history(tmp_path))
    opened = open_history()
    assert opened.store is not None and not opened.store.read_only
    assert opened.notice is not None and "was a link to another file" in opened.notice
    assert "\n" not in opened.notice
    opened.store.close()
