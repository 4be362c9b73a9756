"""A history that cannot be written is opened read-only (its chats shown, writes refused with a
message), and hostile imports are refused with one line, writing nothing."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from chatapp.store import (
    HistoryStore,
    ImportFormatError,
    ImportTooLargeError,
    ReadOnlyStoreError,
    SchemaTooNewError,
    StoreError,
    schema,
)
from chatapp.store.export import LIMITS

ROOT = Path(__file__).resolve().parents[2]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def history(db_path: Path) -> Path:
    """A history with one chat, closed (so its WAL is folded back in)."""
    with HistoryStore(db_path) as store:
        conv = store.create_conversation("Ducks", system_prompt="Be brief.")
        store.append_message(conv.id, "user", "Why do ducks float?")
        store.append_message(conv.id, "assistant", "Air in their feathers.")
    return db_path


def deny_writes(monkeypatch: pytest.MonkeyPatch, *paths: Path) -> None:
    """What a read-only folder looks like to os.access (tests may run as root)."""
    real = os.access
    denied = {str(p) for p in paths}

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if mode & os.W_OK and str(path) in denied:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


WRITES: dict[str, Callable[[HistoryStore], object]] = {
    "create": lambda s: s.create_conversation("new"),
    "append": lambda s: s.append_message(1, "user", "more"),
    "rename": lambda s: s.rename_conversation(1, "Geese"),
    "delete": lambda s: s.delete_conversation(1),
    "truncate": lambda s: s.truncate_after(1),
    "import": lambda s: s.import_json(json.dumps(_valid())),
}


def check_read_only(store: HistoryStore, path: Path, before: str) -> None:
    assert store.read_only
    assert "is read-only" in store.read_only_message() and "\n" not in store.read_only_message()
    assert [c.title for c in store.list_conversations()] == ["Ducks"]
    assert [m.content for m in store.load_conversation(1).messages][1] == "Air in their feathers."
    assert store.search("feathers")
    for name, write in WRITES.items():
        with pytest.raises(ReadOnlyStoreError, match="is read-only"):
            write(store)
        assert name
    store.close()
    assert digest(path) == before


@pytest.mark.parametrize("what", ["folder", "file"])
def test_an_unwritable_history_opens_read_only(
    history: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    before = digest(history)
    deny_writes(monkeypatch, history.parent if what == "folder" else history)
    store = HistoryStore(history)
    assert what in store.read_only_reason  # type: ignore[operator]
    check_read_only(store, history, before)


def test_read_only_on_request(history: Path) -> None:
    check_read_only(HistoryStore(history, read_only=True), history, digest(history))


def test_sqlite_refusing_to_write_falls_back_to_read_only(
    history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-only disk: os.access may say yes, SQLite then says 'readonly database'."""

    def refuse(*_args: Any, **_kwargs: Any) -> str:
        exc = sqlite3.OperationalError("attempt to write a readonly database")
        exc.sqlite_errorcode = 8  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(schema, "configure", refuse)
    check_read_only(HistoryStore(history), history, digest(history))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores permissions")
def test_real_permissions(history: Path) -> None:
    before = digest(history)
    history.chmod(0o444)
    history.parent.chmod(0o555)
    try:
        check_read_only(HistoryStore(history), history, before)
    finally:
        history.parent.chmod(0o755)
        history.chmod(0o644)


def test_a_read_only_history_from_a_newer_chatapp(
    history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = sqlite3.connect(history)
    conn.execute("PRAGMA user_version=99")
    conn.close()
    deny_writes(monkeypatch, history.parent)
    with pytest.raises(SchemaTooNewError):
        HistoryStore(history)


def test_a_damaged_read_only_history_is_left_where_it_is(
    history: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bytearray(history.read_bytes())
    data[4096:8192] = b"\xee" * 4096  # the second page: a table's b-tree
    history.write_bytes(bytes(data))
    before = digest(history)
    deny_writes(monkeypatch, history.parent)
    with pytest.raises(StoreError, match=r"damaged|read-only") as info:
        HistoryStore(history)
    assert "\n" not in str(info.value)
    assert digest(history) == before
    assert not any("corrupt" in p.name for p in history.parent.iterdir())


def test_a_missing_history_in_an_unwritable_place_is_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="Could not create the folder"):
        HistoryStore(blocker / "data" / "history.sqlite3")


# --- imports ----------------------------------------------------------------------------------


def _valid(**conversation: Any) -> dict[str, Any]:
    conv = {
        "title": "Imported",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello", "figures": {"tokens_per_s": 1.5}},
        ],
    }
    conv.update(conversation)
    return {"format": "chatapp-conversation", "version": 1, "conversation": conv}


def message(content: Any = "x", **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **extra}


BIG = LIMITS.message_chars + 1
IMPORTS: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "not valid JSON"),
    "not-json": (b"<html>", "not valid JSON"),
    "not-utf8": (b'{"a": "\xff\xfe"}', "not UTF-8"),
    "nan": (b'{"format": NaN}', "NaN is not allowed"),
    "infinity-as-1e400": (
        json.dumps(_valid()).replace("1.5", "1e400").encode(),
        "must be a number or null",
    ),
    "deeply-nested": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "a-list": (b"[1, 2, 3]", "must be a JSON object"),
    "wrong-format": (json.dumps({"format": "other"}).encode(), '"format" must be'),
    "version-text": (json.dumps({**_valid(), "version": "1"}).encode(), "whole number"),
    "version-99": (json.dumps({**_valid(), "version": 99}).encode(), "newer chatapp"),
    "version-5000-digits": (
        json.dumps({**_valid(), "version": 1})
        .replace('"version": 1', '"version": ' + "9" * 5000)
        .encode(),
        "a number with thousands of digits",
    ),
    "version-4000-digits": (
        json.dumps({**_valid(), "version": 10**3999}).encode(),
        "version " + "1" + "0" * 36 + "... comes from a newer chatapp",
    ),
    "messages-missing": (json.dumps(_valid(messages=None)).encode(), "must be a list"),
    "role-system": (
        json.dumps(_valid(messages=[{"role": "system", "content": "x"}])).encode(),
        "role",
    ),
    "content-number": (json.dumps(_valid(messages=[message(5)])).encode(), "must be a string"),
    "content-too-long": (
        json.dumps(_valid(messages=[message("y" * BIG)])).encode(),
        f"is {BIG} characters long",
    ),
    "too-many-messages": (
        json.dumps(_valid(messages=[message()] * (LIMITS.messages + 1))).encode(),
        f"has {LIMITS.messages + 1} messages",
    ),
    "title-too-long": (json.dumps(_valid(title="t" * 5000)).encode(), "5000 characters long"),
    "lone-surrogate": (
        json.dumps(_valid(messages=[message("caf\udcff")])).encode(),
        "lone surrogate",
    ),
    "surrogate-in-title": (json.dumps(_valid(title="\ud800")).encode(), "lone surrogate"),
    "huge-int-figure": (
        json.dumps(
            _valid(
                messages=[
                    {"role": "assistant", "content": "a", "figures": {"prompt_tokens": 10**30}}
                ]
            )
        ).encode(),
        "whole number >= 0",
    ),
    "bad-time": (json.dumps(_valid(messages=[message(created="yesterday")])).encode(), "ISO 8601"),
    "over-32-MB": (b" " * (LIMITS.file_bytes + 1), "MB; chatapp imports exports of up to 32 MB"),
}


@pytest.mark.parametrize("case", list(IMPORTS))
def test_hostile_import_is_refused_and_writes_nothing(store: HistoryStore, case: str) -> None:
    data, message_text = IMPORTS[case]
    before = store.list_conversations()
    with pytest.raises((ImportFormatError, ImportTooLargeError)) as info:
        store.import_json(data)
    assert message_text in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    assert store.list_conversations() == before


def test_large_but_allowed_messages_import(store: HistoryStore) -> None:
    text = "word " * (LIMITS.message_chars // 5)
    conv = store.import_json(json.dumps(_valid(messages=[message(text)])).encode())
    assert conv.messages[0].content == text


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-dev-zero", "folder", "sparse-1GB"])
def test_import_file_refuses_without_reading(
    store: HistoryStore, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "chat.json"
    if kind == "fifo":
        os.mkfifo(path)  # opening it would block for ever
    elif kind == "dev-zero":
        path = Path("/dev/zero")
    elif kind == "link-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        with path.open("wb") as fh:
            fh.truncate(1 << 30)  # sparse: nothing is written, nothing may be read
    with pytest.raises(StoreError, match=r"not a regular file|up to 32 MB"):
        store.import_file(path)
    assert store.list_conversations() == []


def test_importing_a_32_MB_export_stays_small_in_memory(tmp_path: Path) -> None:
    """The largest allowed export, imported in a fresh process: peak RSS well under 1 GB."""
    chunk = "é" * 900_000  # two bytes each in UTF-8: 1.8 MB per message
    doc = _valid(messages=[message(chunk) for _ in range(18)])
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    assert 30 << 20 < path.stat().st_size <= LIMITS.file_bytes
    code = (
        "import sys\n"
        "from chatapp.store import HistoryStore\n"
        "from scripts.hostile_gguf import peak_mb\n"
        "store = HistoryStore(sys.argv[2])\n"
        "conv = store.import_file(sys.argv[1])\n"
        "print(len(conv.messages), int(peak_mb()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "h.sqlite3")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    count, peak_mb = map(int, result.stdout.split())
    assert count == 18
    assert peak_mb < 600, peak_mb
