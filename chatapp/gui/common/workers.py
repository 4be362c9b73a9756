"""One way to run work off the GUI thread (napari's generator worker is the model).

`JobRunner` owns a QThread and runs `Job`s (chatapp/session/jobs.py) on it one at a time, in
the order they were submitted; so two jobs never use the engine at once. What a job does is
`session.jobs.run_job`'s, as on the server's `JobThread`; this module turns it into signals.
`submit` returns a `JobHandle` at once, whose signals arrive on the GUI thread:

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

import itertools
import logging
import threading
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from chatapp.gui.common.qtcompat import emit
from chatapp.session.jobs import FLUSH_INTERVAL_S, Job, JobError, StopFlags, run_job
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


class _Worker(QObject):
    """Lives in the runner's thread; its slot runs one job."""

    sig_started = Signal(int)
    sig_yielded = Signal(object)  # YieldedBatch
    sig_finished = Signal(int, object)
    sig_errored = Signal(object)  # JobError
    sig_aborted = Signal(int, str)

    def __init__(self, stopped: StopFlags, flush_interval_s: float) -> None:
        super().__init__()
        self.stopped = stopped
        self.flush_interval_s = flush_interval_s

    @Slot(int, object)
    def run(self, request_id: int, job: Job) -> None:
        # Python sees a QThread as "Dummy-N": give the log the thread's Qt name.
        threading.current_thread().name = QThread.currentThread().objectName() or "JobRunner"
        stopped = self.stopped
        run_job(job, request_id, lambda: stopped(request_id), self, self.flush_interval_s)

    # ---- session.jobs.JobListener: on the worker thread, out as signals -------------------
    def started(self, request_id: int) -> None:
        emit(self.sig_started, request_id)

    def yielded(self, request_id: int, items: tuple[Any, ...], snapshot: Any) -> None:
        emit(self.sig_yielded, YieldedBatch(request_id, items, snapshot))

    def finished(self, request_id: int, result: Any) -> None:
        emit(self.sig_finished, request_id, result)

    def errored(self, error: JobError) -> None:
        emit(self.sig_errored, error)

    def aborted(self, request_id: int, message: str) -> None:
        emit(self.sig_aborted, request_id, message)


class JobRunner(QObject):
    """A worker thread that runs jobs in order. Create and use it on the GUI thread."""

    _sig_run = Signal(int, object)  # queued into the worker thread

    def __init__(
        self,
        name: str = "JobRunner",
        flush_interval_s: float = FLUSH_INTERVAL_S,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._ids = itertools.count(1)
        self._last_id = 0
        self._handles: dict[int, JobHandle] = {}
        self._stopped = StopFlags()
        self._worker = _Worker(self._stopped, flush_interval_s)
        self.worker_thread = QThread()
        self.worker_thread.setObjectName(name)
        self._worker.moveToThread(self.worker_thread)
        self._sig_run.connect(self._worker.run)
        w = self._worker
        w.sig_started.connect(self._on_started)
        w.sig_yielded.connect(self._on_yielded)
        w.sig_finished.connect(self._on_finished)
        w.sig_errored.connect(self._on_errored)
        w.sig_aborted.connect(self._on_aborted)
        self.worker_thread.start()

    @property
    def flush_interval_s(self) -> float:
        return self._worker.flush_interval_s

    @flush_interval_s.setter
    def flush_interval_s(self, seconds: float) -> None:
        self._worker.flush_interval_s = seconds

    def submit(self, job: Job) -> JobHandle:
        """Queue `job`; connect to the handle's signals before control returns to Qt."""
        request_id = next(self._ids)
        self._last_id = request_id
        handle = JobHandle(self, request_id, job.name)
        self._handles[request_id] = handle
        emit(self._sig_run, request_id, job)
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
        self._stopped.ids.add(request_id)

    def stop_all(self) -> None:
        """Stop the running job and every queued one."""
        self._stopped.through = max(self._stopped.through, self._last_id)

    @property
    def running(self) -> bool:
        return self.worker_thread.isRunning()

    def shutdown(self, timeout_ms: int = 60_000) -> bool:
        """Stop every job, then end the thread; True once it has ended. Safe to call twice."""
        self.stop_all()
        self.worker_thread.quit()
        return bool(self.worker_thread.wait(timeout_ms))

    # ---- from the worker thread, delivered on the GUI thread -----------------------------
    @Slot(int)
    def _on_started(self, request_id: int) -> None:
        handle = self._handles.get(request_id)
        if handle is not None:
            emit(handle.sig_started)

    @Slot(object)
    def _on_yielded(self, batch: YieldedBatch) -> None:
        handle = self._handles.get(batch.request_id)
        if handle is not None:
            emit(handle.sig_yielded, batch)

    @Slot(int, object)
    def _on_finished(self, request_id: int, result: Any) -> None:
        handle = self._end(request_id)
        if handle is not None:
            emit(handle.sig_finished, result)

    @Slot(object)
    def _on_errored(self, error: JobError) -> None:
        handle = self._end(error.request_id)
        if handle is not None:
            emit(handle.sig_errored, error)

    @Slot(int, str)
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
