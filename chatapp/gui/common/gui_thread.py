"""The one place where the session layer's events reach the GUI thread.

The session's events (session/events.py) call back on the thread that emits them. In the
window that is already the GUI thread: every job's outcome comes back from the engine
service's thread through the JobRunner's relay (workers.py), which uses this delivery too,
and the session emits from the handles' signals. A core that is
handed another `Submit`, or a worker that emits directly, would call widgets from its own
thread; `gui_thread_delivery` makes that impossible for every event of a group at once: a call
made off the GUI thread is queued to it (Qt's queued connection), one made on it runs at once,
so the order of events on the GUI thread is the order they were emitted in.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from chatapp.gui.common.qtcompat import emit
from chatapp.session.events import Deliver


class _GuiThreadCalls(QObject):
    sig_call = Signal(object)  # a Callable[[], None], queued across threads

    def __init__(self, parent: QObject | None) -> None:
        super().__init__(parent)
        self.sig_call.connect(self._run, Qt.ConnectionType.QueuedConnection)

    @Slot(object)
    def _run(self, call: Callable[[], None]) -> None:
        call()

    def deliver(self, call: Callable[[], None]) -> None:
        if QThread.currentThread() is self.thread():
            call()
        else:
            emit(self.sig_call, call)


def gui_thread_delivery(parent: QObject) -> Deliver:
    """A `Deliver` for `EventGroup.deliver_via`, owned by `parent` (create it on the GUI
    thread)."""
    return _GuiThreadCalls(parent).deliver
