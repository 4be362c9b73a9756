"""A damaged file is moved aside (named with the time) and a new history started."""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime
from pathlib import Path

import pytest

from chatapp.store import HistoryStore, StoreBusyError, StoreError
from chatapp.store.recovery import move_aside

CORRUPT_NAME = re.compile(r"^history\.sqlite3\.corrupt-\d{8}-\d{6}(-\d+)?$")


def _filled(path: Path, conversations: int = 4, messages: int = 30) -> None:
    with HistoryStore(path) as s:
        for c in range(conversations):
            conv = s.create_conversation(f"c{c}")
            for i in range(messages):
                s.append_message(conv.id, "user", f"message {i} " + "x" * 2000)
    assert not Path(f"{path}-wal").exists()  # the last close folded the WAL back in


def _assert_fresh_and_usable(store: HistoryStore) -> None:
    assert store.list_conversations() == []
    assert store.integrity_check() == ["ok"]
    conv = store.create_conversation("after recovery")
    store.append_message(conv.id, "user", "still works")
    assert store.load_conversation(conv.id).messages[0].content == "still works"


def test_garbage_file_is_moved_aside(db_path: Path) -> None:
    garbage = b"this is not a database, just some text\n" * 500
    db_path.write_bytes(garbage)
    before = datetime.now().replace(microsecond=0)
    with HistoryStore(db_path) as s:
        r = s.recovery
        assert r is not None
        assert CORRUPT_NAME.match(r.moved_to.name), r.moved_to.name
        assert r.moved_to.parent == db_path.parent
        stamp = datetime.strptime(r.moved_to.name.split("corrupt-")[1][:15], "%Y%m%d-%H%M%S")
        assert before <= stamp <= datetime.now()
        assert r.moved_to.read_bytes() == garbage  # kept, byte for byte
        assert "not a database" in r.reason
        assert str(r.moved_to) in r.message() and str(db_path) in r.message()
        _assert_fresh_and_usable(s)
    with HistoryStore(db_path) as s:  # the next start is normal again
        assert s.recovery is None
        assert [c.title for c in s.list_conversations()] == ["after recovery"]


def test_companion_files_move_with_it(db_path: Path) -> None:
    db_path.write_bytes(b"\x00garbage" * 1000)
    Path(f"{db_path}-wal").write_bytes(b"stale log")
    Path(f"{db_path}-shm").write_bytes(b"stale index")
    with HistoryStore(db_path) as s:
        assert s.recovery is not None
        moved = s.recovery.moved_to
        # The log may hold the newest data: kept as it was (SQLite deletes it on close).
        assert Path(f"{moved}-wal").read_bytes() == b"stale log"
        assert Path(f"{moved}-shm").exists()  # an index SQLite rebuilds: moved, not kept as is
        assert len(s.recovery.moved_files) == 3
        _assert_fresh_and_usable(s)


@pytest.mark.parametrize("keep", [0.5, 0.1, 0.97])
def test_truncated_database_is_moved_aside(db_path: Path, keep: float) -> None:
    _filled(db_path)
    size = db_path.stat().st_size
    cut = int(size * keep) // 4096 * 4096 + (0 if keep < 0.5 else 123)  # on and off page edges
    with db_path.open("r+b") as f:
        f.truncate(cut)
    with HistoryStore(db_path) as s:
        assert s.recovery is not None
        assert s.recovery.moved_to.stat().st_size == cut
        assert "malformed" in s.recovery.reason
        _assert_fresh_and_usable(s)


def test_overwritten_page_fails_quick_check(db_path: Path) -> None:
    _filled(db_path)
    data = bytearray(db_path.read_bytes())
    # Page 3 onwards is b-tree content; scribble over one page in the middle.
    middle = (len(data) // 4096 // 2) * 4096
    data[middle : middle + 4096] = b"\xa5" * 4096
    db_path.write_bytes(bytes(data))
    with HistoryStore(db_path) as s:
        assert s.recovery is not None
        _assert_fresh_and_usable(s)


def test_healthy_database_is_left_alone(db_path: Path) -> None:
    _filled(db_path, conversations=2, messages=3)
    with HistoryStore(db_path) as s:
        assert s.recovery is None
        assert len(s.list_conversations()) == 2
    assert [p.name for p in db_path.parent.iterdir()] == ["history.sqlite3"]


def test_a_locked_file_is_busy_not_corrupt(db_path: Path) -> None:
    # Another program holding an exclusive lock (rollback-journal mode) must not get the
    # file moved aside: the store reports "busy" and changes nothing.
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("CREATE TABLE other (x)")
    conn.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreBusyError, match="busy"):
            HistoryStore(db_path, timeout_s=0.05)
    finally:
        conn.execute("ROLLBACK")
        conn.close()
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["history.sqlite3"]


def test_corrupt_names_do_not_collide(tmp_path: Path) -> None:
    when = datetime(2026, 11, 3, 14, 5, 9)
    names = []
    for i in range(3):
        path = tmp_path / "history.sqlite3"
        path.write_bytes(f"bad {i}".encode())
        names.append(move_aside(path, "test", when).moved_to.name)
    assert names == [
        "history.sqlite3.corrupt-20261103-140509",
        "history.sqlite3.corrupt-20261103-140509-1",
        "history.sqlite3.corrupt-20261103-140509-2",
    ]
    assert (tmp_path / names[1]).read_bytes() == b"bad 1"


def test_a_path_that_cannot_be_opened_is_an_error_not_corruption(tmp_path: Path) -> None:
    folder = tmp_path / "history.sqlite3"
    folder.mkdir()  # a folder where the file should be
    with pytest.raises(StoreError, match="could not be used"):
        HistoryStore(folder)
    assert folder.is_dir() and [p.name for p in tmp_path.iterdir()] == ["history.sqlite3"]


@pytest.mark.parametrize("scribbles", [1, 3, 8])
def test_the_recovery_line_is_one_short_line_whatever_sqlite_says(
    db_path: Path, scribbles: int
) -> None:
    """quick_check answers in rows that hold newlines ("*** in database main ***\\nPage 5:
    ..."), up to pages of them; the person reads one line."""
    _filled(db_path, conversations=8)
    data = bytearray(db_path.read_bytes())
    pages = len(data) // 4096
    for n in range(scribbles):
        at = (pages * (n + 1) // (scribbles + 1)) * 4096
        data[at : at + 4096] = bytes((i * 7 + n) % 256 for i in range(4096))
    db_path.write_bytes(bytes(data))
    with HistoryStore(db_path) as s:
        assert s.recovery is not None
        message = s.recovery.message()
    assert "\n" not in message and "  " not in message
    assert len(message) < 200 + len(str(db_path)) + len(str(s.recovery.moved_to)) + 120


@pytest.mark.parametrize(
    "reason",
    ["*** in database main ***\nPage 5: btreeInitPage() returns error code 11", "x" * 5000],
)
def test_one_line_of_sqlites_words(reason: str) -> None:
    from chatapp.store.recovery import REASON_CHARS, one_line

    line = one_line(reason)
    assert "\n" not in line and len(line) <= REASON_CHARS
