"""The one owner of the thread that touches a loaded model (docs/architecture.md, "Threads").

An `EngineService` has one thread and one queue: jobs (session/jobs.py) run on it one at a
time, in the order submitted, through `run_job`, so two of them never use the engine at once.
Every face is a client: the window's `JobRunner` (gui/common/workers.py) submits the chat's
answers, comparison runs, model loads and "Serve this model"'s requests and relays what they do
to the GUI thread; `chatapp serve` (server/worker.py) submits its requests; `chatapp generate`
streams one answer through `stream`. When a model is served with N > 1 requests at once
(`serve_batch`), the same thread runs the batch's loop (engine/batch_loop.py): each request
becomes a task on a slot of the engine's `SlotBatch` (engine/slots.py), and between two jobs
the thread runs passes of that loop (admitting waiting requests, one batched step, resuming
each answer), taking the next job or request from the queue between two passes. A job runs
whole: the batch waits for it (the window's chat answering while it serves). No other module
creates a thread that runs the model, and no other thread runs it
(tests/test_architecture.py, tests/session/test_engine_service.py check both).

`close()` lets what was queued before it run (and the batch's requests end), then ends the
thread; a job submitted after it still runs, with its stop flag set, so that it ends at once in
its own way (the server answers "shutting down"); a request handed to a closed batch is refused
at once.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from chatapp.engine.batch_loop import BatchLoop, Task
from chatapp.engine.slots import SlotBatch, SlotLoop
from chatapp.session.jobs import (
    FLUSH_INTERVAL_S,
    Job,
    JobAborted,
    JobControl,
    JobError,
    JobListener,
    StopFlags,
    run_job,
)

log = logging.getLogger(__name__)
DROPPED = "Stopped: the engine closed before it ran."
STOP_WAIT_S = 10.0  # how long a caller that leaves waits for its job to stop
R = TypeVar("R")
T = TypeVar("T")
IDLE_WAIT_S = 0.002  # a pass that moved nothing (every answer waits for room): the next waits


class Unheard:
    """A listener for jobs that report on their own (the server's answer their clients)."""

    def started(self, request_id: int) -> None:
        pass

    def yielded(self, request_id: int, items: tuple[Any, ...], snapshot: Any) -> None:
        pass

    def finished(self, request_id: int, result: Any) -> None:
        pass

    def errored(self, error: JobError) -> None:
        pass

    def aborted(self, request_id: int, message: str) -> None:
        pass


class EngineService:
    """One thread with one queue: jobs, and the loops of served batches between them (no
    Qt)."""

    def __init__(
        self,
        name: str = "chatapp-engine",
        listener: JobListener | None = None,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        """`listener` hears every job submitted without one of its own."""
        self.name = name
        self.listener: JobListener = listener or Unheard()
        self.flush_interval_s = flush_interval_s
        self._ids = itertools.count(1)
        self._last_id = 0
        self._stopped = StopFlags()
        self._dropped_through = 0  # jobs up to this one end as stopped without running
        self._queue: queue.Queue[tuple[int, Job, JobListener] | _Wake | None] = queue.Queue()
        self._posted: deque[Callable[[], None]] = deque()  # work for the thread, in order
        self._closed = False
        self._batches: list[BatchServing[Any]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    # ---- any thread ----------------------------------------------------------------------
    def submit(self, job: Job, listener: JobListener | None = None) -> int:
        """Queue `job`; returns its request id (for `request_stop`). `listener` hears it,
        called on the service's thread."""
        with self._lock:
            request_id = self._last_id = next(self._ids)
            if self._closed:
                self._stopped.ids.add(request_id)
            self._queue.put((request_id, job, listener or self.listener))
        return request_id

    def waiting(self) -> list[Job]:
        """The jobs in the queue, not the one running (a snapshot)."""
        with self._queue.mutex:
            return [item[1] for item in self._queue.queue if isinstance(item, tuple)]

    def request_stop(self, request_id: int) -> None:
        """Callable from any thread; the job reads it between steps."""
        self._stopped.ids.add(request_id)

    def stop_all(self) -> None:
        """Stop the running job and every queued one."""
        self._stopped.through = max(self._stopped.through, self._last_id)

    @property
    def queued(self) -> int:
        """Jobs and served requests queued, not yet running (a snapshot)."""
        with self._lock:
            posted = len(self._posted)
        return posted + len(self.waiting())

    @property
    def alive(self) -> bool:
        """True until the job thread has ended."""
        return self._thread.is_alive()

    @property
    def on_service_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def serve_batch(
        self,
        batch: SlotBatch,
        answer: Callable[[R, SlotLoop], Task],
        refuse: Callable[[R], None],
    ) -> BatchServing[R]:
        """Requests answered together on `batch`'s slots by this service's thread: each
        becomes the task `answer(request, slot)` of the batch's loop (engine/batch_loop.py);
        the returned object queues them. Closing the service closes it too."""
        serving: BatchServing[R] = BatchServing(self, batch, answer, refuse)
        with self._lock:
            self._batches = [b for b in self._batches if not b.ended.is_set()] + [serving]
        self.post(lambda: None)  # the thread sees the new batch
        return serving

    def post(self, work: Callable[[], None]) -> None:
        """Run `work` on the service's thread, in the order posted, before its next pass of
        the batches (a served request joining its batch's loop), also while a job runs."""
        with self._lock:
            self._posted.append(work)
        self._queue.put(_WAKE)

    def close(self, timeout: float | None = None, drop_waiting: bool = False) -> bool:
        """Run what is queued (the batches' requests end first), then end the thread (waiting
        at most `timeout` seconds); True once it has ended. Safe to call twice. `drop_waiting`:
        the queued jobs do not run; each ends as stopped (`JobListener.aborted`), as the window
        closing wants (a model load waiting behind an answer must not keep it open)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if drop_waiting:
                self._dropped_through = self._last_id
            first, self._closed = not self._closed, True
            batches = list(self._batches)
        for serving in batches:  # their requests end first, on the thread
            serving.close(_left(deadline))
        if first:
            self._queue.put(None)
        if not self.on_service_thread:
            self._thread.join(_left(deadline))
        return not self._thread.is_alive()

    # ---- the service's thread ------------------------------------------------------------
    def _loop(self) -> None:
        closing = False
        while True:
            self._run_posted()  # the requests that came join before the next pass
            busy = self._busy_batches()
            if closing and not busy:
                break
            moved = False
            for serving in busy:
                moved = serving.run_pass() or moved
            # Between two passes, only what is already queued; where nothing moved (every
            # answer waits for room), a little wait; with no batch busy, until something comes.
            item = self._next(None if not busy else 0.0 if moved else IDLE_WAIT_S)
            if item is None:
                closing = True
            elif isinstance(item, tuple):
                self._run(*item)  # the batches take their passes between its items
        while True:  # submitted while closing: each ends at once, stopped
            self._run_posted()
            item = self._next(0.0)
            if item is _NOTHING:
                break
            if isinstance(item, tuple):
                self._stopped.ids.add(item[0])
                self._run(*item)
        self._run_posted()
        with self._lock:
            for serving in self._batches:  # nothing runs them any more
                serving.ended.set()

    def _next(self, timeout: float | None) -> tuple[int, Job, JobListener] | _Wake | None:
        """The next item queued, waiting at most `timeout` seconds (None: until one comes);
        _NOTHING where none came."""
        try:
            if timeout is None:
                return self._queue.get()
            if timeout <= 0:
                return self._queue.get_nowait()
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return _NOTHING

    def _run_posted(self) -> None:
        while True:
            with self._lock:
                if not self._posted:
                    return
                work = self._posted.popleft()
            try:
                work()
            except Exception:  # one request failing to join must not end the thread
                log.exception("work posted to %s failed", self.name)

    def _between(self) -> None:
        """While a job runs, after each item it makes (the chat's tokens): the requests that
        came join, and each busy batch takes a pass, so that they decode beside it."""
        self._run_posted()
        for serving in self._busy_batches():
            serving.run_pass()

    def _busy_batches(self) -> list[BatchServing[Any]]:
        """The batches with requests to run; a closed one without any has ended."""
        with self._lock:
            batches = list(self._batches)
        busy = []
        for serving in batches:
            if serving.loop.busy:
                busy.append(serving)
            elif serving.sealed:
                serving.ended.set()
        return busy

    def _run(self, request_id: int, job: Job, listener: JobListener) -> None:
        stopped = self._stopped
        try:
            if request_id <= self._dropped_through:
                log.info("%s %d dropped: the service closed", job.name, request_id)
                listener.aborted(request_id, DROPPED)
                return
            run_job(
                job,
                request_id,
                lambda: stopped(request_id),
                listener,
                self.flush_interval_s,
                self._between,
            )
        except Exception:  # a listener's fault (its receiver gone): the next jobs still run
            log.exception("%s %d: its listener failed", job.name, request_id)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class _Wake:
    """A wake-up in the queue: work was posted (`EngineService.post`), or nothing came."""


_WAKE = _Wake()  # work was posted
_NOTHING = _Wake()  # nothing came in the time given


class BatchServing(Generic[R]):
    """A model served with N requests at once (`EngineService.serve_batch`): requests queue
    with the service's jobs and join the batch's loop, which the service's thread runs between
    them; each request is answered on a slot of `batch` by the task `answer(request, slot)`."""

    def __init__(
        self,
        service: EngineService,
        batch: SlotBatch,
        answer: Callable[[R, SlotLoop], Task],
        refuse: Callable[[R], None],
    ) -> None:
        self.batch = batch
        self.loop = BatchLoop(batch)
        self._service = service
        self._answer = answer
        self._refuse = refuse
        self.closed = False  # requests submitted from now on are refused
        self.sealed = False  # the service's thread has joined every request submitted before
        self.ended = threading.Event()  # sealed, and every request it took has ended
        self._lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return not self.ended.is_set()

    def submit(self, request: R) -> None:
        """Queue `request` (any thread); refused at once once closed."""
        with self._lock:
            if not self.closed:
                self._service.post(lambda: self._join(request))
                return
        self._refuse(request)

    def run_pass(self) -> bool:
        """One pass of the batch's loop (the service's thread); False: nothing moved."""
        try:
            return self.loop.run_pass()
        except Exception:  # a fault of the batch's own: its requests were told in words
            log.exception("a pass of the served batch failed")
            return True

    def close(self, timeout: float | None = None) -> None:
        """Run what is queued, then end (waiting at most `timeout` seconds, unless called on
        the service's thread)."""
        with self._lock:
            self.closed = True
        self._service.post(self._seal)  # after the requests submitted before
        if not self._service.alive:
            self.ended.set()
        elif not self._service.on_service_thread:
            self.ended.wait(timeout)

    def _seal(self) -> None:
        self.sealed = True

    def _join(self, request: R) -> None:
        self.loop.add(lambda slot: self._answer(request, slot))


class _Streamed:
    """What `stream` hears: the items, then the end, handed to the waiting caller."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[str, Any]] = queue.Queue()

    def started(self, request_id: int) -> None:
        pass

    def yielded(self, request_id: int, items: tuple[Any, ...], snapshot: Any) -> None:
        for item in items:
            self.items.put(("item", item))

    def finished(self, request_id: int, result: Any) -> None:
        self.items.put(("end", result))

    def errored(self, error: JobError) -> None:
        self.items.put(("end", None))  # the job's own exception is re-raised (`stream`)

    def aborted(self, request_id: int, message: str) -> None:
        self.items.put(("end", None))


def stream(
    name: str,
    work: Callable[[Callable[[], bool]], Iterator[T]],
    service: EngineService | None = None,
) -> Generator[T, None, None]:
    """Run `work(stopped)` as a job on `service` (without one, on a service of its own, closed
    at the end) and yield its items here, as they come (`chatapp generate`: the caller waits,
    as on its own thread). An exception `work` raises is raised here, as it was; leaving early
    (Ctrl+C) stops the job."""

    def run(control: JobControl) -> None:
        for item in work(lambda: control.stopped):
            control.put(item)

    yield from _relayed(name, run, service, STOP_WAIT_S)


def call(
    name: str,
    work: Callable[[Callable[[Any], None], Callable[[], bool]], R],
    heard: Callable[[Any], None],
    service: EngineService | None = None,
) -> R:
    """Run `work(say, stopped)` as a job on `service` (as `stream`) and return what it
    returns; each item it says is handed to `heard` here, as it comes (`chatapp bench`: its
    progress lines). An exception `work` raises is raised here, as it was; leaving early
    (Ctrl+C) asks it to stop and waits for nothing (a measurement may not look)."""
    results: list[R] = []

    def run(control: JobControl) -> None:
        results.append(work(control.put, lambda: control.stopped))

    for item in _relayed(name, run, service, 0.0):
        heard(item)
    if not results:  # stopped before it ran (the service closing)
        raise JobAborted(DROPPED)
    return results[0]


def _relayed(
    name: str, run: Callable[[JobControl], None], service: EngineService | None, wait_s: float
) -> Generator[Any, None, None]:
    """The items `run` puts, on the caller's thread, while it runs as a job on `service` (or
    a service of its own, which waits at most `wait_s` for a job left early to stop)."""
    if service is None:
        own = EngineService(f"chatapp-{name}")
        try:
            yield from _relayed(name, run, own, wait_s)
        finally:
            own.stop_all()
            own.close(wait_s)
        return
    failure: list[BaseException] = []

    def guarded(control: JobControl) -> None:
        try:
            run(control)
        except BaseException as exc:  # raised again on the caller's thread, as it was
            failure.append(exc)

    heard = _Streamed()
    request_id = service.submit(Job(name, guarded, flush_interval_s=0.0), heard)
    ended = False
    try:
        while True:
            kind, item = heard.items.get()
            if kind == "end":
                ended = True
                break
            yield item
    finally:
        if not ended:
            service.request_stop(request_id)
    if failure:
        raise failure[0]
