"""SIGTERM (a logout, a service manager, `kill`) ends the window as quitting does: the jobs stop
and clean up after themselves (a conversion removes its `.partial` folder), settings are saved.

Python runs a signal handler only when the interpreter gets control, which Qt's event loop does
not give it while idle; so the signal also writes a byte to a socket (`signal.set_wakeup_fd`)
that a QSocketNotifier watches, and the handler runs then. It asks the application to exit its
event loop (not to close the window, which could ask about unsaved messages: no one answers a
SIGTERM); `main` then shuts the window down as after any quit.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading

from PySide6.QtCore import QObject, QSocketNotifier
from PySide6.QtWidgets import QApplication

log = logging.getLogger(__name__)


class _TerminateWatch(QObject):
    def __init__(self, app: QApplication) -> None:
        super().__init__(app)
        self.app = app
        self.reader, self.writer = socket.socketpair()
        self.reader.setblocking(False)
        self.writer.setblocking(False)
        self.notifier = QSocketNotifier(self.reader.fileno(), QSocketNotifier.Type.Read, self)
        self.notifier.activated.connect(self._on_wakeup)

    def _on_wakeup(self) -> None:
        with contextlib.suppress(OSError):  # the handler has run by now; empty the socket
            self.reader.recv(256)

    def terminate(self, _signum: int, _frame: object) -> None:
        log.info("SIGTERM: quitting")
        self.app.exit(0)


def quit_on_terminate(app: QApplication) -> None:
    """Install the SIGTERM handling described above (main thread only; elsewhere nothing)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        return
    watch = _TerminateWatch(app)
    try:
        signal.set_wakeup_fd(watch.writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):  # pragma: no cover - a platform without it
        log.warning("SIGTERM will end the window at once here", exc_info=True)
        return
    signal.signal(signal.SIGTERM, watch.terminate)
