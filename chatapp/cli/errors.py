"""Errors the command line reports as one line (exit code 2)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class UserError(Exception):
    """Something the user can fix; printed as one line, exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a service manager, `kill`, a logout) while a command writes files: raised like
    Ctrl+C's KeyboardInterrupt, so the same clean-up runs (a conversion's `.partial` folder,
    the packed-copy child); exit code 143."""


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """While the body runs on the main thread, SIGTERM raises Terminated there instead of
    ending the process on the spot."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(_signum: int, _frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
