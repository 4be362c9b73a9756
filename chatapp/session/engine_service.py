"""The one owner of the threads that touch a loaded model (docs/architecture.md, "Threads").

An `EngineService` has one job thread and one queue: jobs (session/jobs.py) run on it one at
a time, in the order submitted, through `run_job`, so two of them never use the engine at
once. Every face is a client: the window's `JobRunner` (gui/common/workers.py) submits the
chat's answers, comparison runs, model loads and "Serve this model"'s requests and relays
what they do to the GUI thread; `chatapp serve` (server/worker.py) submits its requests;
`chatapp generate` streams one answer through `stream`. When a model is served with N > 1
requests at once, the service also makes the batch's N slot threads (`serve_slots`): each
takes the next waiting request and answers it on its own slot of the engine's `SlotBatch`
(engine/slots.py), and `close` joins them with the job thread. No other module creates a
thread that runs the model (tests/test_architecture.py checks it).

`close()` lets what was queued before it run, then ends the threads; a job submitted after it
still runs, with its stop flag set, so that it ends at once in its own way (the server
answers "shutting down"); a request handed to closed slots is refused at once.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

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
    """One job thread with one queue, and the slot threads of a served batch (no Qt)."""

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
        self._queue: queue.Queue[tuple[int, Job, JobListener] | None] = queue.Queue()
        self._closed = False
        self._slots: list[SlotThreads[Any]] = []
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
            return [item[1] for item in self._queue.queue if item is not None]

    def request_stop(self, request_id: int) -> None:
        """Callable from any thread; the job reads it between steps."""
        self._stopped.ids.add(request_id)

    def stop_all(self) -> None:
        """Stop the running job and every queued one."""
        self._stopped.through = max(self._stopped.through, self._last_id)

    @property
    def alive(self) -> bool:
        """True until the job thread has ended."""
        return self._thread.is_alive()

    @property
    def on_service_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def serve_slots(
        self,
        batch: SlotBatch,
        answer: Callable[[R, SlotLoop], None],
        refuse: Callable[[R], None],
    ) -> SlotThreads[R]:
        """Start `batch.size` threads that answer requests together, each on its own slot;
        the returned pool queues them. Closing the service closes it too."""
        pool: SlotThreads[R] = SlotThreads(batch, answer, refuse, self.name)
        with self._lock:
            self._slots = [p for p in self._slots if not p.closed] + [pool]
        return pool

    def close(self, timeout: float | None = None, drop_waiting: bool = False) -> bool:
        """Run what is queued, then end the threads (waiting at most `timeout` seconds);
        True once they have ended. Safe to call twice. `drop_waiting`: the queued jobs do not
        run; each ends as stopped (`JobListener.aborted`), as the window closing wants (a model
        load waiting behind an answer must not keep it open)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            if drop_waiting:
                self._dropped_through = self._last_id
            if not self._closed:
                self._closed = True
                self._queue.put(None)
            pools = list(self._slots)
        for pool in pools:
            pool.close(_left(deadline))
        if not self.on_service_thread:
            self._thread.join(_left(deadline))
        return not self._thread.is_alive() and not any(p.alive for p in pools)

    # ---- the service's thread ------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                break
            self._run(*item)
        while True:  # submitted while closing: each ends at once, stopped
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._stopped.ids.add(item[0])
                self._run(*item)

    def _run(self, request_id: int, job: Job, listener: JobListener) -> None:
        stopped = self._stopped
        try:
            if request_id <= self._dropped_through:
                log.info("%s %d dropped: the service closed", job.name, request_id)
                listener.aborted(request_id, DROPPED)
                return
            run_job(job, request_id, lambda: stopped(request_id), listener, self.flush_interval_s)
        except Exception:  # a listener's fault (its receiver gone): the next jobs still run
            log.exception("%s %d: its listener failed", job.name, request_id)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class SlotThreads(Generic[R]):
    """`chatapp serve --parallel N`'s N threads (made by `EngineService.serve_slots`): each
    takes the next waiting request and answers it on a free slot of `batch`; prompts are
    prefilled one at a time, and the decode steps of every request being answered run as
    one batched step."""

    def __init__(
        self,
        batch: SlotBatch,
        answer: Callable[[R, SlotLoop], None],
        refuse: Callable[[R], None],
        name: str = "chatapp",
    ) -> None:
        self.batch = batch
        self._answer = answer
        self._refuse = refuse
        self._queue: queue.Queue[R | None] = queue.Queue()
        self.closed = False
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-slot-{i}", daemon=True)
            for i in range(batch.size)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def submit(self, request: R) -> None:
        with self._lock:
            if not self.closed:
                self._queue.put(request)
                return
        self._refuse(request)

    def close(self, timeout: float | None = None) -> None:
        """Run what is queued, then end the threads (waiting at most `timeout` seconds)."""
        with self._lock:
            if not self.closed:
                self.closed = True
                for _ in self._threads:
                    self._queue.put(None)
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(_left(deadline))

    def _loop(self) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            loop = self.batch.acquire()
            assert loop is not None  # as many threads as slots: one is always free here
            try:
                self._answer(request, loop)
            finally:
                self.batch.release(loop)


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
