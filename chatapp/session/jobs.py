"""Work that runs off the GUI thread, described without Qt: a job is a function of a
`JobControl`, usually a generator.

The GUI's `JobRunner` (chatapp/gui/common/workers.py) runs jobs one at a time on its worker
thread and turns what they do into signals: every yielded item goes out (batched in time), the
return value is the result, `JobAborted` means "stopped", any other exception is an error that
the user sees as one line (`Job.explain`) and the log keeps with its traceback. The functions
here never see a signal, so they can be tested, and reused, without Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

from chatapp.error_text import first_line

NO_DETAILS = "no details"  # an error without a message, after its type name
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
