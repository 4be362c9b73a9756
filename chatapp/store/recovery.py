"""Moving a damaged history file aside so the app can start with a new one.

The old file is kept, never deleted: a person (or `sqlite3 file .recover`) may still get
conversations out of it. Its -wal/-shm/-journal companions go with it under matching names
(`<new name>-wal`), so SQLite opening the moved copy still finds its log, and a stale log is
never replayed into the new database. They are copied *before* the damaged connection closes:
SQLite deletes -wal/-shm when its last connection closes, even for a file it could not read,
and the -wal may hold the newest conversations.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from chatapp.safe_delete import not_plain, set_aside

log = logging.getLogger(__name__)
COMPANION_SUFFIXES = ("-wal", "-shm", "-journal")


@dataclass(frozen=True)
class Recovery:
    """What the GUI tells the person after a damaged history was replaced."""

    original: Path
    moved_to: Path
    moved_files: tuple[Path, ...]  # moved_to and any moved companions
    reason: str  # SQLite's words, e.g. "file is not a database"
    link: bool = False  # the history's name was a link: the link was moved, its target kept

    def message(self) -> str:
        if self.link:
            return (
                f"The chat history {self.original} was a link to another file, which chatapp "
                f"does not write through. The link was moved to {self.moved_to.name} (the file "
                "it points to is untouched) and a new, empty history was started."
            )
        return (
            f"The chat history file {self.original} was damaged ({one_line(self.reason)}). "
            f"It was moved to {self.moved_to} and a new, empty history was started."
        )


REASON_CHARS = 200  # SQLite's integrity text can run to pages: the first of it, one line


def one_line(reason: str) -> str:
    """SQLite's words as one short line (its integrity checks answer in several)."""
    text = " ".join(reason.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def problems_line(problems: list[str]) -> str:
    """The first few rows of a `PRAGMA quick_check` that did not say "ok", as one line."""
    return one_line("; ".join(problems[:3]))


def corrupt_name(path: Path, when: datetime) -> Path:
    """`history.sqlite3.corrupt-YYYYMMDD-HHMMSS` (local time), with -1, -2... if taken."""
    stem = f"{path.name}.corrupt-{when.strftime('%Y%m%d-%H%M%S')}"
    candidate = path.with_name(stem)
    n = 1
    while any(Path(f"{candidate}{s}").exists() for s in ("", *COMPANION_SUFFIXES)):
        candidate = path.with_name(f"{stem}-{n}")
        n += 1
    return candidate


def move_aside(
    path: Path,
    reason: str,
    when: datetime | None = None,
    close: Callable[[], None] | None = None,
) -> Recovery:
    """Move `path` and its companions aside; `close` closes the connection that found the
    damage (called after the companions are copied, before the rename: Windows cannot rename
    an open file)."""
    target = corrupt_name(path, when or datetime.now())
    companions = [s for s in COMPANION_SUFFIXES if Path(f"{path}{s}").exists()]
    for suffix in companions:
        shutil.copy2(f"{path}{suffix}", f"{target}{suffix}")
    if close is not None:
        close()
    os.replace(path, target)
    for suffix in companions:
        if Path(f"{path}{suffix}").exists():  # still there: take it, it is the newest
            os.replace(f"{path}{suffix}", f"{target}{suffix}")
    moved = (target, *(Path(f"{target}{s}") for s in companions))
    return Recovery(original=path, moved_to=target, moved_files=moved, reason=reason)


def set_links_aside(path: Path) -> Recovery | None:
    """Before the history at `path` is opened to write: a link at its name (SQLite writes
    where it points) is moved aside with its companions (a stale -wal is never replayed into
    the new file), and a link at a companion's name alone (SQLite would write its log through
    it) is moved aside; each logged in one line. The Recovery to show when the history itself
    was a link, else None. OSError when a link cannot be moved."""
    recovery = None
    if not_plain(path).startswith("it is a link"):
        target = set_aside(path)
        moved = [target]
        for suffix in COMPANION_SUFFIXES:
            if os.path.lexists(f"{path}{suffix}"):
                os.rename(f"{path}{suffix}", f"{target}{suffix}")
                moved.append(Path(f"{target}{suffix}"))
        recovery = Recovery(path, target, tuple(moved), "it is a link", link=True)
        log.warning("%s", recovery.message())
    for suffix in COMPANION_SUFFIXES:
        companion = Path(f"{path}{suffix}")
        if not_plain(companion).startswith("it is a link"):
            aside = set_aside(companion)
            log.warning(
                "%s was a link, which SQLite would write through; moved to %s",
                companion,
                aside.name,
            )
    return recovery
