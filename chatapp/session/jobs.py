"""Work that runs off the GUI thread, described without Qt: a job is a function of a
`JobControl`, usually a generator. One vocabulary for the window and the server.

`run_job` runs one job and says what it did to a `JobListener`: every yielded item goes out
(batched in time), the return value is the result, `JobAborted` means "stopped", any other
exception is an error that the user sees as one line (`Job.explain`) and the log keeps with
its traceback. One thread runs jobs one at a time, in order, through it: the engine service's
(session/engine_service.py), which every face submits to; the GUI's `JobRunner`
(chatapp/gui/common/workers.py) turns what they do into signals. The jobs never see a signal,
so they can be tested, and reused, without Qt.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol

from chatapp.error_text import first_line

FLUSH_INTERVAL_S = 0.03  # a fast model must not flood the receiver (the GUI's event queue)
NO_DETAILS = "no details"  # an error without a message, after its type name
log = logging.getLogger(__name__)
perf = time.perf_counter
JobResult = Generator[Any, None, Any] | Any
"""What a job function returns: a generator (its items stream out, its return value is the
result) or, for work that reports through `JobControl.put`, the result itself."""


class JobAborted(Exception):
    """Raised by a job that saw its stop flag and gives up; the message is for the user."""


@dataclass(eq=False)
class JobControl:
    """The job's side of the runner: the stop flag, and ways to send things out."""

    request_id: int
    _stopped: Callable[[], bool]
    _put: Callable[[Any], None]
    _flush: Callable[[], None]
    # Set by the job: called on the worker thread at every flush, its result travels with the
    # batch (e.g. a copy of the running figures, which the job keeps changing).
    snapshot: Callable[[], Any] | None = None
    # Set by the job: what it had made when it failed (e.g. the figures up to the fault).
    partial: Any = None

    @property
    def stopped(self) -> bool:
        """True once the GUI asked this job to stop; read it between steps."""
        return self._stopped()

    def put(self, item: Any) -> None:
        """Send `item` out as if it had been yielded (for progress callbacks)."""
        self._put(item)

    def flush(self) -> None:
        """Send what is pending now, not at the next tick (e.g. the first token: the time to
        first token is what the user waits for)."""
        self._flush()


@dataclass(frozen=True)
class Job:
    """One piece of work. `run(control)` does it on the worker thread."""

    name: str  # for the log: "generation", "model load", ...
    run: Callable[[JobControl], JobResult]
    # The line the user reads when `run` raises; the log keeps the traceback of the unexpected.
    explain: Callable[[BaseException], str] = field(default=lambda exc: failed("It", exc))
    # Exceptions that are the user's or the input's doing: one warning line, no traceback.
    expected: tuple[type[BaseException], ...] = ()
    # How often, at most, what it yields reaches the GUI (None: the runner's default).
    flush_interval_s: float | None = None


def failed(what: str, exc: BaseException) -> str:
    """'<what> failed: <Type>: <first line>' for an error nobody foresaw."""
    return f"{what} failed: {type(exc).__name__}: {first_line(exc, empty=NO_DETAILS)}"


def one_line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class JobError:
    """How a job failed: one line for the user; the log has the traceback."""

    request_id: int
    message: str  # one line for the user
    partial: Any = None  # what the job left in `JobControl.partial`, if anything
    kind: type[BaseException] = Exception  # the exception's class (its traceback is logged)
    detail: str = ""  # the exception's own message


class JobListener(Protocol):
    """What a runner does with what a job does; called on the job's thread. Exactly one of
    finished, errored and aborted ends every job, after the items it yielded."""

    def started(self, request_id: int) -> None: ...

    def yielded(self, request_id: int, items: tuple[Any, ...], snapshot: Any) -> None: ...

    def finished(self, request_id: int, result: Any) -> None: ...

    def errored(self, error: JobError) -> None: ...

    def aborted(self, request_id: int, message: str) -> None: ...


def run_job(
    job: Job,
    request_id: int,
    stopped: Callable[[], bool],
    listener: JobListener,
    flush_interval_s: float = FLUSH_INTERVAL_S,
    between: Callable[[], None] | None = None,
) -> None:
    """Run `job` on the calling thread; exceptions never leave it (they go to `listener`).
    `between`: called after each item the job makes (the engine service's served batches take
    a pass there, session/engine_service.py)."""
    pending: list[Any] = []
    last_flush = -float("inf")

    def flush(with_snapshot: bool = True) -> None:
        nonlocal last_flush
        last_flush = perf()
        if pending:
            wanted = with_snapshot and control.snapshot is not None
            snapshot = control.snapshot() if wanted else None  # type: ignore[misc]
            listener.yielded(request_id, tuple(pending), snapshot)
            pending.clear()

    interval = flush_interval_s if job.flush_interval_s is None else job.flush_interval_s

    def put(item: Any) -> None:
        pending.append(item)
        if perf() - last_flush >= interval:
            flush()
        if between is not None:
            between()

    control = JobControl(request_id, stopped, put, flush)
    listener.started(request_id)
    started = perf()
    try:
        result = job.run(control)
        if inspect.isgenerator(result):
            result = _drain(result, put)
        flush()
    except JobAborted as exc:
        _flush_after_fault(flush, job.name, request_id)
        log.info("%s %d stopped: %s", job.name, request_id, exc)
        listener.aborted(request_id, one_line(str(exc)))
    except Exception as exc:
        _flush_after_fault(flush, job.name, request_id)  # what was made stays visible
        message = explain(job, exc)
        if isinstance(exc, job.expected):  # a refusal foreseen: one line is the whole story
            log.warning("%s %d: %s", job.name, request_id, message)
        else:
            log.error("%s %d: %s", job.name, request_id, message, exc_info=exc)
        listener.errored(JobError(request_id, message, control.partial, type(exc), str(exc)))
    else:
        log.debug("%s %d finished in %.3f s", job.name, request_id, perf() - started)
        listener.finished(request_id, result)


def _flush_after_fault(flush: Callable[[bool], None], name: str, request_id: int) -> None:
    """Send what the job made before it ended, without the figures if they are what failed:
    nothing raised here may keep the job's end (its error event) from going out."""
    try:
        flush(True)
    except Exception:
        log.exception("%s %d: its last figures failed", name, request_id)
        try:
            flush(False)
        except Exception:
            log.exception("%s %d: its last items could not be sent", name, request_id)


def explain(job: Job, exc: Exception) -> str:
    try:
        return one_line(job.explain(exc))
    except Exception:  # the explanation must not be what kills the runner
        log.exception("explaining a %s failure failed", job.name)
        return failed(job.name.capitalize(), exc)


def _drain(generator: Generator[Any, Any, Any], put: Callable[[Any], None]) -> Any:
    """Send every item out; the generator's return value is the job's result."""
    while True:
        try:
            item = next(generator)
        except StopIteration as stop:
            return stop.value
        put(item)


class StopFlags:
    """Written by any thread, read by the running job between steps. Set membership and int
    stores are atomic under the GIL, and a flag, once set, is never cleared."""

    def __init__(self) -> None:
        self.ids: set[int] = set()
        self.through = 0  # every request up to this one (shutdown)

    def __call__(self, request_id: int) -> bool:
        return request_id <= self.through or request_id in self.ids
