"""The window's client of the engine service (napari's generator worker is the model).

`JobRunner` submits `Job`s (chatapp/session/jobs.py) to an `EngineService`
(session/engine_service.py), which runs them on its one thread, one at a time, in the order
they were submitted; so two jobs never use the engine at once. The runner owns no thread: it
relays what each job does (`session.jobs.run_job`'s events, on the service's thread) to the
GUI thread through gui_thread.py's delivery, as signals of the job's `JobHandle`, which
`submit` returns at once:

    sig_started()            the job began
    sig_yielded(batch)       a YieldedBatch: the items yielded (or `put`) since the last one,
                             at most one batch every `flush_interval_s` unless the job flushes
    sig_finished(value)      the job returned `value`
    sig_errored(error)       a JobError: one line for the user; the log has the traceback
    sig_aborted(message)     the job stopped (it raised JobAborted)

Exactly one of the last three ends every job, after the items it yielded. `handle.stop()` only
sets a flag that the job reads between steps (`JobControl.stopped`): the GUI thread never
waits for the worker. Like Spyder's workers, exceptions never leave the worker thread.
"""

from __future__ import annotations

import logging
from typing import Any

from PySide6.QtCore import QObject, Signal

from chatapp.gui.common.gui_thread import gui_thread_delivery
from chatapp.gui.common.qtcompat import emit
from chatapp.session.engine_service import EngineService
from chatapp.session.jobs import FLUSH_INTERVAL_S, Job, JobError
from chatapp.session.running import JobWatcher, YieldedBatch

__all__ = ["FLUSH_INTERVAL_S", "JobError", "JobHandle", "JobRunner", "YieldedBatch"]
log = logging.getLogger(__name__)


class JobHandle(QObject):
    """One submitted job, seen from the GUI thread."""

    sig_started = Signal()
    sig_yielded = Signal(object)  # YieldedBatch
    sig_finished = Signal(object)  # the job's return value
    sig_errored = Signal(object)  # JobError
    sig_aborted = Signal(str)

    def __init__(self, runner: JobRunner, request_id: int, name: str) -> None:
        super().__init__(runner)
        self.runner = runner
        self.request_id = request_id
        self.name = name
        self.done = False

    def stop(self) -> None:
        """Ask the job to stop after its current step (returns at once)."""
        self.runner.request_stop(self.request_id)


class _Relay:
    """A `JobListener` on the service's thread: each event goes to the GUI thread, in order."""

    def __init__(self, runner: JobRunner) -> None:
        self.runner = runner
        self.deliver = gui_thread_delivery(runner)  # made on the GUI thread, owned by the runner

    def started(self, request_id: int) -> None:
        self.deliver(lambda: self.runner._on_started(request_id))

    def yielded(self, request_id: int, items: tuple[Any, ...], snapshot: Any) -> None:
        batch = YieldedBatch(request_id, items, snapshot)
        self.deliver(lambda: self.runner._on_yielded(batch))

    def finished(self, request_id: int, result: Any) -> None:
        self.deliver(lambda: self.runner._on_finished(request_id, result))

    def errored(self, error: JobError) -> None:
        self.deliver(lambda: self.runner._on_errored(error))

    def aborted(self, request_id: int, message: str) -> None:
        self.deliver(lambda: self.runner._on_aborted(request_id, message))


class JobRunner(QObject):
    """Submits jobs to an engine service and relays them. Create and use it on the GUI thread;
    without `service` it starts one of its own (named `name`), which `shutdown` closes."""

    def __init__(
        self,
        name: str = "JobRunner",
        flush_interval_s: float = FLUSH_INTERVAL_S,
        parent: QObject | None = None,
        service: EngineService | None = None,
    ) -> None:
        super().__init__(parent)
        self._handles: dict[int, JobHandle] = {}
        self._relay = _Relay(self)
        self.service = service or EngineService(name, flush_interval_s=flush_interval_s)

    @property
    def flush_interval_s(self) -> float:
        return self.service.flush_interval_s

    @flush_interval_s.setter
    def flush_interval_s(self, seconds: float) -> None:
        self.service.flush_interval_s = seconds

    def submit(self, job: Job) -> JobHandle:
        """Queue `job`; connect to the handle's signals before control returns to Qt."""
        request_id = self.service.submit(job, self._relay)
        handle = JobHandle(self, request_id, job.name)
        self._handles[request_id] = handle
        return handle

    def watch(self, job: Job, watcher: JobWatcher) -> JobHandle:
        """Queue `job` with its callbacks (the application core's `Submit`, session/running.py):
        they run on this thread, as the handle's signals arrive."""
        handle = self.submit(job)
        handle.sig_yielded.connect(watcher.on_yielded)
        handle.sig_finished.connect(watcher.on_finished)
        handle.sig_errored.connect(watcher.on_errored)
        handle.sig_aborted.connect(watcher.on_aborted)
        return handle

    def request_stop(self, request_id: int) -> None:
        """Callable from any thread; the job reads it between steps."""
        self.service.request_stop(request_id)

    def stop_all(self) -> None:
        """Stop the running job and every queued one."""
        self.service.stop_all()

    @property
    def running(self) -> bool:
        """True until the service's thread has ended."""
        return self.service.alive

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Stop the running job, drop the queued ones (each ends as stopped, never run), then
        end the service's threads; True once they have ended. Safe to call twice."""
        self.stop_all()
        return self.service.close(timeout_ms / 1000, drop_waiting=True)

    # ---- from the service's thread, delivered on the GUI thread -----------------------------
    def _on_started(self, request_id: int) -> None:
        handle = self._handles.get(request_id)
        if handle is not None:
            emit(handle.sig_started)

    def _on_yielded(self, batch: YieldedBatch) -> None:
        handle = self._handles.get(batch.request_id)
        if handle is not None:
            emit(handle.sig_yielded, batch)

    def _on_finished(self, request_id: int, result: Any) -> None:
        handle = self._end(request_id)
        if handle is not None:
            emit(handle.sig_finished, result)

    def _on_errored(self, error: JobError) -> None:
        handle = self._end(error.request_id)
        if handle is not None:
            emit(handle.sig_errored, error)

    def _on_aborted(self, request_id: int, message: str) -> None:
        handle = self._end(request_id)
        if handle is not None:
            emit(handle.sig_aborted, message)

    def _end(self, request_id: int) -> JobHandle | None:
        handle = self._handles.pop(request_id, None)
        if handle is not None:
            handle.done = True
            handle.setParent(None)  # the runner no longer keeps it; whoever holds it does
        return handle
