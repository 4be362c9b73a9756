"""How the application core hands a `Job` to a worker and hears back, without Qt.

The core (backend_session.py, chat.py, history_sync.py) never owns a thread. It is given a
`Submit`: a function that queues a job on some worker and calls the `JobWatcher`'s callbacks
later, on the thread that submitted it. The window passes its `JobRunner.watch`
(gui/common/workers.py: the job runs on the engine service's thread, session/engine_service.py,
and its outcome comes back to the GUI thread as Qt signals); the core's
tests pass `InlineRunner` (runs the job at once, on the caller's thread).

What a watcher hears, in order: zero or more `on_yielded(YieldedBatch)`, then exactly one of
`on_finished(value)`, `on_errored(JobError)`, `on_aborted(message)`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatapp.session.jobs import Job, JobError, run_job


@dataclass(frozen=True)
class YieldedBatch:
    request_id: int
    items: tuple[Any, ...]
    snapshot: Any = None  # what the job's `JobControl.snapshot` said at this flush


def _ignore(_value: Any) -> None:
    return None


@dataclass(frozen=True)
class JobWatcher:
    """The callbacks of one submitted job; those left out are not called."""

    on_yielded: Callable[[YieldedBatch], None] = _ignore
    on_finished: Callable[[Any], None] = _ignore
    on_errored: Callable[[JobError], None] = _ignore
    on_aborted: Callable[[str], None] = _ignore


class RunningJob(Protocol):
    """A submitted job as its submitter sees it."""

    @property
    def request_id(self) -> int: ...

    def stop(self) -> None:
        """Ask the job to stop after its current step (returns at once)."""


Submit = Callable[[Job, JobWatcher], RunningJob]


@dataclass(eq=False)
class _Inline:
    request_id: int
    stopped: bool = False

    def stop(self) -> None:
        self.stopped = True


class InlineRunner:
    """A `Submit` without a worker (tests, scripts): jobs queue until `drain()` runs them in
    order on the calling thread, as a worker would, calling the watchers as they go.
    `stop_after` stops every job after that many items (to test stopping; a job with its own
    flush interval is counted as it flushes)."""

    def __init__(self, stop_after: int | None = None) -> None:
        self._ids = itertools.count(1)
        self.stop_after = stop_after
        self.queue: list[tuple[Job, JobWatcher, _Inline]] = []
        self.names: list[str] = []  # the jobs run, in order

    def __call__(self, job: Job, watcher: JobWatcher) -> RunningJob:
        running = _Inline(next(self._ids))
        self.queue.append((job, watcher, running))
        return running

    def drain(self) -> int:
        """Run every queued job (and those they queue); returns how many ran."""
        count = 0
        while self.queue:
            self._run(*self.queue.pop(0))
            count += 1
        return count

    def _run(self, job: Job, watcher: JobWatcher, running: _Inline) -> None:
        self.names.append(job.name)
        # Every item reaches the listener at once (so stop_after counts them); the watcher
        # hears them as one batch before the job's end, as from a worker's last flush.
        run_job(
            job, running.request_id, lambda: running.stopped, _Batched(self, watcher, running), 0.0
        )


@dataclass(eq=False)
class _Batched:
    """A JobListener that gathers a job's items into one batch for its JobWatcher."""

    runner: InlineRunner
    watcher: JobWatcher
    running: _Inline
    items: list[Any] = field(default_factory=list)
    snapshot: Any = None

    def started(self, request_id: int) -> None:
        return None

    def yielded(self, request_id: int, items: tuple[Any, ...], snapshot: Any) -> None:
        self.items.extend(items)
        self.snapshot = snapshot
        limit = self.runner.stop_after
        if limit is not None and len(self.items) >= limit:
            self.running.stopped = True

    def _flush(self) -> None:
        if self.items:
            self.watcher.on_yielded(
                YieldedBatch(self.running.request_id, tuple(self.items), self.snapshot)
            )
            self.items.clear()

    def finished(self, request_id: int, result: Any) -> None:
        self._flush()
        self.watcher.on_finished(result)

    def errored(self, error: JobError) -> None:
        self._flush()
        self.watcher.on_errored(error)

    def aborted(self, request_id: int, message: str) -> None:
        self._flush()
        self.watcher.on_aborted(message)
