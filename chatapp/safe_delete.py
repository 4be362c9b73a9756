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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

OWNED_MARKER = ".chatapp-owned"


def mark_owned(folder: Path) -> None:
    """Mark `folder`, which the app just made, as one `remove_owned` may delete."""
    (folder / OWNED_MARKER).write_text("made by chatapp; safe for it to delete\n", "utf-8")


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
    """A UTF-8 text file to write that then takes the place of `path`: written beside it and
    renamed over it, so that a `path` that is a symbolic link (a report folder's `result.json`
    linking to a file of the user's) is replaced as a link, and the file it pointed to is
    untouched. Nothing is left behind when the body fails."""
    with (
        replacing_path(path) as temporary,
        open(temporary, "x", encoding="utf-8", newline=newline) as fh,
    ):
        yield fh


@contextmanager
def replacing_path(path: Path) -> Iterator[Path]:
    """A fresh path beside `path` to write (by any means, with the usual permissions); renamed
    over `path` at the end."""
    temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.writing"
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
