"""Two instances on one file, and a process killed while it writes."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import chatapp
from chatapp.store import ConversationNotFoundError, HistoryStore
from tests.store.conftest import FULL_FIGURES

REPO = Path(chatapp.__file__).resolve().parent.parent

# Appends messages forever (or `count` of them) and prints each id once it is committed.
WRITER = """
import sys, time
from chatapp.store import Figures, HistoryStore
path, conv_id, count, size, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), sys.argv[5]
pause = float(sys.argv[6])
store = HistoryStore(path)
print("ready", flush=True)
i = 0
while count < 0 or i < count:
    role = "assistant" if i % 2 else "user"
    figures = Figures(mode="naive", tokens_per_s=float(i)) if role == "assistant" else None
    m = store.append_message(conv_id, role, f"{tag} {i} " + "x" * size, figures)
    print(m.id, flush=True)  # only after append_message returned: committed
    i += 1
    if pause:
        time.sleep(pause)
store.close()
"""


def _writer(
    path: Path, conv_id: int, count: int, size: int, tag: str, pause: float = 0.0
) -> subprocess.Popen[str]:
    """Start the writer and wait until it has opened the store.

    Read its stdout with readline()/read() only: communicate() would bypass what readline()
    already buffered. stderr goes to a file so a chatty child can never block on a full pipe.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    err = path.with_name(f"{tag}.stderr")
    args = [str(path), str(conv_id), str(count), str(size), tag, str(pause)]
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, *args],
            stdout=subprocess.PIPE,
            stderr=err_file,
            text=True,
            env=env,
            cwd=REPO,
        )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        proc.wait()
        raise AssertionError(f"writer did not start: {line!r} {err.read_text()}")
    return proc


def _finish(proc: subprocess.Popen[str]) -> str:
    """The rest of the child's output, once it has ended."""
    assert proc.stdout is not None
    rest = proc.stdout.read()
    proc.stdout.close()
    proc.wait(timeout=30)
    return rest


def test_two_stores_on_one_file(db_path: Path) -> None:
    a = HistoryStore(db_path)
    b = HistoryStore(db_path)
    try:
        conv = a.create_conversation("shared")
        assert b.has_external_changes() is True  # b learns that a wrote
        assert b.has_external_changes() is False  # ...once
        assert [c.title for c in b.list_conversations()] == ["shared"]

        for i in range(10):  # interleaved writers on the same conversation
            (a if i % 2 == 0 else b).append_message(conv.id, "user", f"m{i}")
        assert a.has_external_changes() is True
        assert b.has_external_changes() is True
        for s in (a, b):
            messages = s.load_conversation(conv.id).messages
            assert [m.content for m in messages] == [f"m{i}" for i in range(10)]
            assert [m.position for m in messages] == list(range(10))

        b.append_message(conv.id, "assistant", "by b", FULL_FIGURES)
        assert b.has_external_changes() is False  # its own write is not news
        a.rename_conversation(conv.id, "renamed by a")
        assert b.get_conversation(conv.id).title == "renamed by a"

        assert a.delete_conversation(conv.id)
        with pytest.raises(ConversationNotFoundError, match="another chatapp window"):
            b.append_message(conv.id, "user", "too late")
        assert b.list_conversations() == []
    finally:
        a.close()
        b.close()


def test_a_store_per_thread(db_path: Path) -> None:
    main = HistoryStore(db_path)
    conv = main.create_conversation("threads")
    errors: list[BaseException] = []

    def work(tag: str) -> None:
        try:
            with HistoryStore(db_path) as s:
                for i in range(25):
                    s.append_message(conv.id, "user", f"{tag}{i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in "abc"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    messages = main.load_conversation(conv.id).messages
    assert [m.position for m in messages] == list(range(75))
    assert sorted(m.content for m in messages) == sorted(
        f"{t}{i}" for t in "abc" for i in range(25)
    )
    main.close()


def test_second_process_writes_alongside(db_path: Path) -> None:
    with HistoryStore(db_path) as store:
        conv = store.create_conversation("two processes")
        other = store.create_conversation("mine only")
        # Both pause a little between writes so that they really take turns on the lock.
        child = _writer(db_path, conv.id, 150, 500, "child", pause=0.001)
        mine = []
        for i in range(150):
            mine.append(store.append_message(conv.id, "user", f"parent {i}").id)
            store.append_message(other.id, "user", f"solo {i}")
            time.sleep(0.001)
        out = _finish(child)
        assert child.returncode == 0, (db_path.parent / "child.stderr").read_text()
        theirs = [int(line) for line in out.split()]
        assert len(theirs) == 150

        messages = store.load_conversation(conv.id).messages
        assert [m.position for m in messages] == list(range(300))
        writers = [m.content.split()[0] for m in messages]
        assert sum(a != b for a, b in itertools.pairwise(writers)) >= 10  # truly interleaved
        assert sorted(m.id for m in messages) == sorted(mine + theirs)
        assert len(store.load_conversation(other.id).messages) == 150
        assert store.integrity_check() == ["ok"]


def test_killed_writer_loses_nothing_it_committed(db_path: Path) -> None:
    with HistoryStore(db_path) as store:
        conv_id = store.create_conversation("killed").id
    committed: list[int] = []
    # Kill at different depths; each round starts on the file the last kill left behind.
    for round_, kill_after in enumerate((3, 40, 250)):
        tag = f"round{round_}"
        child = _writer(db_path, conv_id, -1, 20_000, tag)
        assert child.stdout is not None
        reported = 0
        while reported < kill_after:
            line = child.stdout.readline()
            assert line.endswith("\n"), (db_path.parent / f"{tag}.stderr").read_text()
            committed.append(int(line))
            reported += 1
        child.kill()  # SIGKILL: no cleanup, no close, likely in the middle of a commit
        rest = _finish(child)
        assert child.returncode != 0
        # It died with the store open: its log was never folded back in, recovery must cope.
        assert Path(f"{db_path}-wal").stat().st_size > 0
        # Lines the child printed before it died are committed too; a cut-off line is not.
        committed += [int(x) for x in rest.split("\n")[:-1] if x.strip()]

        with HistoryStore(db_path) as store:
            assert store.recovery is None
            assert store.integrity_check() == ["ok"]
            messages = store.load_conversation(conv_id).messages
            ids = {m.id for m in messages}
            missing = [i for i in committed if i not in ids]
            assert missing == [], f"round {round_}: committed messages lost: {missing}"
            # At most the one in flight got in without being reported; positions stay whole.
            assert len(messages) - len(committed) in (0, 1)
            assert [m.position for m in messages] == list(range(len(messages)))
            last = messages[-1]
            assert last.content.startswith(f"{tag} ")
            committed = [m.id for m in messages]  # an unreported one is fine: count it in
