"""The app's log file: `chatapp.log` in the data folder's `logs/` (Help > Open log folder).

Errors reach the user as one line; the log keeps what a developer needs: the traceback, the
thread, the time. It rotates at 1 MB and keeps three old files. No Qt here.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import threading
from pathlib import Path
from types import TracebackType

from chatapp.datadir import logs_dir

LOG_FILE = "chatapp.log"
FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"
_HANDLER_NAME = "chatapp-file"

log = logging.getLogger("chatapp")


def setup_logging(folder: Path | None = None, level: int = logging.INFO) -> Path:
    """Send the `chatapp` loggers to the log file (again: replaces an earlier setup), and
    log uncaught exceptions of any thread there too. Returns the file's path."""
    folder = folder if folder is not None else logs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOG_FILE
    for old in [h for h in log.handlers if h.get_name() == _HANDLER_NAME]:
        log.removeHandler(old)
        old.close()
    handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=1_000_000, backupCount=3, encoding="utf-8", delay=True
    )
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter(FORMAT))
    log.addHandler(handler)
    log.setLevel(level)
    _log_uncaught_exceptions()
    return path


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
