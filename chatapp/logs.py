"""The app's log file: `chatapp.log` in the data folder's `logs/` (Help > Open log folder).

Errors reach the user as one line; the log keeps what a developer needs: the traceback, the
thread, the time. It rotates at 1 MB and keeps three old files. No Qt here.

The log is one of the app's own files, so a link planted at its name is never written through
(it would append the app's lines to the file it points to): anything but a plain file found
there at start is moved aside (the link itself, never its target), and the file is opened with
O_NOFOLLOW, so a link planted later costs lines, not another file's content. The same for the
`logs/` folder: a link there (or a file) is moved aside and a folder of the app's own made.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import stat
import sys
import threading
from pathlib import Path
from types import TracebackType

from chatapp.datadir import logs_dir
from chatapp.safe_delete import not_plain, set_aside

LOG_FILE = "chatapp.log"
FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"
_HANDLER_NAME = "chatapp-file"

log = logging.getLogger("chatapp")


def setup_logging(folder: Path | None = None, level: int = logging.INFO) -> Path:
    """Send the `chatapp` loggers to the log file (again: replaces an earlier setup), and
    log uncaught exceptions of any thread there too. Returns the file's path."""
    folder = folder if folder is not None else logs_dir()
    moved = [_set_aside_unless_plain(folder, folder=True)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOG_FILE
    moved.append(_set_aside_unless_plain(path))
    for old in [h for h in log.handlers if h.get_name() == _HANDLER_NAME]:
        log.removeHandler(old)
        old.close()
    handler = _PlainFileHandler(
        path, maxBytes=1_000_000, backupCount=3, encoding="utf-8", delay=True
    )
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter(FORMAT))
    log.addHandler(handler)
    log.setLevel(level)
    for line in moved:
        if line:
            log.warning("%s", line)
    _log_uncaught_exceptions()
    return path


class _PlainFileHandler(logging.handlers.RotatingFileHandler):
    """Appends to the file at its name itself: never through a link (O_NOFOLLOW), never
    waiting on a FIFO (O_NONBLOCK, which a plain file ignores)."""

    def _open(self) -> io.TextIOWrapper:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NO_LINK | _NO_WAIT | _NO_INHERIT
        fd = os.open(self.baseFilename, flags, 0o644)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{self.baseFilename} is not a plain file")
        raw = io.BufferedWriter(io.FileIO(fd, "a"))  # as open(..., "a") builds it
        return io.TextIOWrapper(raw, encoding=self.encoding, errors=self.errors)


_NO_LINK = getattr(os, "O_NOFOLLOW", 0)  # POSIX; Windows has no such links to follow
_NO_WAIT = getattr(os, "O_NONBLOCK", 0)
_NO_INHERIT = getattr(os, "O_CLOEXEC", 0)


def _set_aside_unless_plain(path: Path, folder: bool = False) -> str:
    """Move what is at `path` aside when it is not a plain file (a real folder with `folder`):
    a link itself, never its target; the line to log, "" when nothing was moved. OSError: the
    caller runs without a log file."""
    problem = not_plain(path, folder)
    if not problem:
        return ""
    aside = set_aside(path, folder)
    return f"{path} was moved aside to {aside.name}: {problem}"


def _log_uncaught_exceptions() -> None:
    """Also into the log: exceptions nobody caught (a Qt slot's end up in sys.excepthook)."""
    if getattr(sys.excepthook, "_chatapp", False):
        return
    previous_hook = sys.excepthook
    previous_thread_hook = threading.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        log.critical("uncaught exception", exc_info=(kind, exc, tb))
        previous_hook(kind, exc, tb)

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            exc_info = (args.exc_type, args.exc_value, args.exc_traceback)
            log.critical("uncaught exception in %s", args.thread, exc_info=exc_info)
        previous_thread_hook(args)

    hook._chatapp = True  # type: ignore[attr-defined]
    sys.excepthook = hook
    threading.excepthook = thread_hook
