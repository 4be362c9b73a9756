"""The log file is the app's own file (issue 48): a link planted at its name is never written
through, and nothing there but a plain file keeps the app from logging."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.logs import LOG_FILE, setup_logging

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="links and FIFOs: POSIX")
log = logging.getLogger("chatapp.test_logs")


@pytest.fixture(autouse=True)
def no_file_handlers() -> Iterator[None]:
    yield
    chatapp_log = logging.getLogger("chatapp")
    for handler in list(chatapp_log.handlers):
        handler.close()
        chatapp_log.removeHandler(handler)


def flush() -> None:
    for handler in logging.getLogger("chatapp").handlers:
        handler.flush()


def users_file(tmp_path: Path) -> Path:
    target = tmp_path / "home" / ".bashrc"
    target.parent.mkdir()
    target.write_text("the user's own lines\n")
    return target


@pytest.mark.parametrize("kind", ["link to a file", "dangling link", "folder", "fifo"])
def test_what_is_not_a_plain_file_at_the_logs_name_is_moved_aside(
    tmp_path: Path, kind: str
) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    target = users_file(tmp_path)
    if kind == "link to a file":
        (folder / LOG_FILE).symlink_to(target)
    elif kind == "dangling link":  # the app would create the file it names
        (folder / LOG_FILE).symlink_to(tmp_path / "home" / "new-file")
    elif kind == "folder":
        (folder / LOG_FILE).mkdir()
    else:
        os.mkfifo(folder / LOG_FILE)  # opening it to write would wait for a reader
    path = setup_logging(folder)
    log.warning("a line of the app's")
    flush()
    assert target.read_text() == "the user's own lines\n"
    assert not (tmp_path / "home" / "new-file").exists()
    assert path.is_file() and not path.is_symlink()
    text = path.read_text()
    assert "a line of the app's" in text and "moved aside" in text
    (aside,) = [p for p in folder.iterdir() if p.name.startswith(f"{LOG_FILE}.not-a-file-")]
    if "link" in kind:
        assert aside.is_symlink()  # the link itself was moved, its target untouched


def test_a_link_planted_after_the_start_is_not_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logging, "raiseExceptions", False)  # the failed open: no stderr noise
    folder = tmp_path / "logs"
    target = users_file(tmp_path)
    path = setup_logging(folder)  # nothing there yet: the file is opened at the first line
    path.symlink_to(target)
    log.warning("a line of the app's")
    flush()
    assert target.read_text() == "the user's own lines\n"


def test_a_plain_log_file_is_appended_to(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / LOG_FILE).write_text("an earlier run\n")
    path = setup_logging(folder)
    log.warning("this run")
    flush()
    lines = path.read_text().splitlines()
    assert lines[0] == "an earlier run" and lines[-1].endswith("this run")
    assert [p.name for p in folder.iterdir()] == [LOG_FILE]  # nothing moved aside


@pytest.mark.parametrize("kind", ["link to a folder", "dangling link", "file"])
def test_what_is_not_a_folder_at_the_logs_folders_name_is_moved_aside(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$DATA/logs itself: a link there made the log go into the folder it named."""
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    users = tmp_path / "home" / "documents"
    users.mkdir(parents=True)
    planted = tmp_path / "data" / "logs"
    if kind == "link to a folder":
        planted.symlink_to(users)
    elif kind == "dangling link":
        planted.symlink_to(tmp_path / "home" / "new-folder")
    else:
        planted.write_text("the user's own lines\n")
    path = setup_logging()
    log.warning("a line of the app's")
    flush()
    assert path == planted / LOG_FILE
    assert planted.is_dir() and not planted.is_symlink()
    assert list(users.iterdir()) == [] and not (tmp_path / "home" / "new-folder").exists()
    text = path.read_text()
    assert "a line of the app's" in text and "moved aside" in text and str(planted) in text
    (aside,) = [p for p in planted.parent.iterdir() if p.name.startswith("logs.not-a-folder-")]
    if "link" in kind:
        assert aside.is_symlink()  # the link itself was moved, its target untouched
    else:
        assert aside.read_text() == "the user's own lines\n"
