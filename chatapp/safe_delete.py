"""The one way chatapp deletes folders: only those it made, never through a symbolic link; and
files it writes under its own names, never through a link either. No Qt.

Every folder the app may later delete (a packed-weights copy, a conversion's `.partial`
folder) is marked as it is made, with `OWNED_MARKER`, or is recognised by a shape only the
app writes (the caller's `owned` check). `remove_owned` then deletes a folder only where:
- it lies inside `within` (the place the caller cleans), with no symbolic link from `within`
  down to it (`within` itself included): a data folder's `cache/packed` that links to a
  folder of the user's is never cleaned;
- it is a real folder (not a link) that the app marked or recognises as its own.
Links found inside are removed as links (`shutil.rmtree` never follows them), so a
link inside a folder of ours to a folder of the user's leaves the user's folder whole.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

OWNED_MARKER = ".chatapp-owned"
_NO_LINK = getattr(os, "O_NOFOLLOW", 0)  # POSIX; Windows has no such links to follow


def mark_owned(folder: Path) -> None:
    """Mark `folder`, which the app just made, as one `remove_owned` may delete. The marker is
    created exclusively, never through a link: a folder that has one already, or that is a
    link, was not just made by the app (OSError)."""
    if folder.is_symlink():
        raise OSError(f"{folder} is a symbolic link; it is not marked as chatapp's")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINK | getattr(os, "O_CLOEXEC", 0)
    with os.fdopen(os.open(folder / OWNED_MARKER, flags, 0o666), "w", encoding="utf-8") as fh:
        fh.write("made by chatapp; safe for it to delete\n")


def marked_owned(folder: Path) -> bool:
    """Whether `folder` carries the app's marker (a regular file, not a link)."""
    marker = folder / OWNED_MARKER
    return not marker.is_symlink() and marker.is_file()


def linked_between(within: Path, path: Path) -> Path | None:
    """The first symbolic link from `within` (included) down to `path` (included); None when
    there is none. A `path` not under `within` answers `path` itself (never delete it)."""
    try:
        rest = path.relative_to(within)
    except ValueError:
        return path
    if ".." in rest.parts:
        return path
    current = within
    for part in ("", *rest.parts):
        current = current / part if part else current
        if current.is_symlink():
            return current
    return None


def remove_owned(path: Path, within: Path, owned: Callable[[Path], bool] = marked_owned) -> bool:
    """Delete the folder `path` if it is the app's own (see the module); True when it is gone.
    Never raises: what cannot be deleted stays, and the log says why."""
    link = linked_between(within, path)
    if link is not None:
        log.warning("not deleting %s: %s is a symbolic link or outside %s", path, link, within)
        return False
    if not path.exists():
        return True
    if not path.is_dir() or not owned(path):
        log.warning("not deleting %s: chatapp did not make it", path)
        return False
    shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


@contextmanager
def replacing(path: Path, newline: str | None = None) -> Iterator[IO[str]]:
    """A UTF-8 text file to write that then takes the place of `path`: written to a fresh
    temporary file beside it (`replacing_path`) and renamed over it, so that a `path` that is a
    symbolic link (a report folder's `result.json` linking to a file of the user's) is replaced
    as a link, and the file it pointed to is untouched. Nothing is left behind when the body
    fails."""
    with (
        replacing_path(path) as temporary,
        os.fdopen(_reopen(temporary), "w", encoding="utf-8", newline=newline) as fh,
    ):
        yield fh


def write_replacing(path: Path, data: str | bytes) -> None:
    """The one way the app writes a whole file of its own: `data` (text as UTF-8) to a fresh
    temporary file beside `path`, renamed over it (see `replacing_path`)."""
    with replacing_path(path) as temporary, os.fdopen(_reopen(temporary), "wb") as fh:
        fh.write(data.encode("utf-8") if isinstance(data, str) else data)


def _reopen(temporary: Path) -> int:
    """The file `replacing_path` just made, opened to write without following a link."""
    return os.open(temporary, os.O_WRONLY | _NO_LINK | getattr(os, "O_CLOEXEC", 0))


def open_temporary(temporary: Path) -> IO[bytes]:
    """The file `replacing_path` just made, to write bytes into (never through a link)."""
    return os.fdopen(_reopen(temporary), "wb")


@contextmanager
def replacing_path(path: Path) -> Iterator[Path]:
    """A fresh path beside `path` to write (by any means, with the usual permissions); renamed
    over `path` at the end. The temporary file is created here, exclusively and without
    following a link (O_EXCL | O_NOFOLLOW), under a random name: a link planted at any name
    beside `path` is never written through; writing to the path then opens that new file."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.writing"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_LINK | getattr(os, "O_CLOEXEC", 0)
    os.close(os.open(temporary, flags, 0o666))
    try:
        yield temporary
        if temporary.is_symlink() or not temporary.is_file():  # swapped for a link meanwhile
            raise OSError(f"{temporary} was replaced while it was written")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def not_plain(path: Path, folder: bool = False) -> str:
    """Why what is at `path` may not be used as one of the app's own files (a real folder with
    `folder`): "" when it may be, or when nothing is there. The settings file, the log file and
    its folder, the history database and its companions are never used through a link."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return exc.strerror or "it cannot be read"
    if stat.S_ISLNK(mode):
        return "it is a link to another " + ("folder" if folder else "file")
    if folder:
        return "" if stat.S_ISDIR(mode) else "it is not a folder"
    return "" if stat.S_ISREG(mode) else "it is not a plain file"


def set_aside(path: Path, folder: bool = False) -> Path:
    """Rename what is at `path` (a link itself, never its target) to a new name beside it,
    `NAME.not-a-file-YYYYMMDD-HHMMSS` (`not-a-folder` with `folder`), never over one moved aside
    before; returns that name. OSError when it cannot be moved."""
    kind = "folder" if folder else "file"
    stem = f"{path.name}.not-a-{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    aside, n = path.with_name(stem), 1
    while os.path.lexists(aside):
        aside, n = path.with_name(f"{stem}-{n}"), n + 1
    os.rename(path, aside)
    return aside
