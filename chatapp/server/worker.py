"""The one thread that owns the Engine: requests wait in a queue and run one at a time.

The engine is single-stream (one KV cache per loop), so two generations must never overlap.
The HTTP side hands in a `ServedRequest` with a `deliver` callback (thread-safe, e.g. onto an
asyncio queue) and gets back `Started`, then `Delta`s, then `Done` or `Failed`. A request
whose `cancelled` flag is set (the client went away) stops within one step of the loop.

The worker starts no thread: the engine service (session/engine_service.py) owns them. Each
request is answered by a `Job` (session/jobs.py) submitted to the service, from the HTTP
thread: the worker's own service (`chatapp serve`), or the one given (the window's "Serve this
model": served requests and the chat's answers take turns on its one queue). Closing a worker
on a service it does not own answers its waiting requests at once (`closed_message`), without
waiting for the job running ahead of them.

With `parallel` N > 1 (`chatapp serve`'s default where the model can batch), requests are
answered together by the batch loop the service's thread runs (engine/batch_loop.py), each on a
slot of the engine (engine/slots.py), all within one KV budget: each answer is a task
(`answer_turns`) that yields where its token waits for the batched step, so that their decode
steps run as one step on the IO-Binding loop. A request naming another loop runs whole on the
engine's own cache when its turn comes, while the batch waits.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from chatapp.engine.errors import (
    ContextOverflowError,
    DeviceFailure,
    EngineError,
    ModelError,
    SlotStopped,
)
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import BiasRefused
from chatapp.engine.structured.constraints import ConstraintError
from chatapp.error_text import first_line
from chatapp.server.errors import ApiError
from chatapp.server.events import (
    Delta,
    Done,
    Failed,
    RequestEvent,
    RequestRecord,
    ServedRequest,
    Started,
    TokenOut,
)
from chatapp.server.operators import Load, ServerCounters, retry_after_s
from chatapp.server.request_body import GenerationRequest
from chatapp.server.token_text import TokenText
from chatapp.session.answer import (
    AnswerDone,
    Opened,
    TextDelta,
    TokenInfo,
    ToolPiece,
    Turn,
    answer_turns,
    fall_back_to_cpu,
)
from chatapp.session.engine_service import BatchServing, EngineService
from chatapp.session.jobs import Job, JobControl

if TYPE_CHECKING:
    from chatapp.engine.backend import BackendCard
    from chatapp.engine.engine import Engine
    from chatapp.engine.metrics import RunStats
    from chatapp.engine.slots import SlotBatch, SlotLoop

perf = time.perf_counter
LOGPROB_FLOOR = -9999.0  # OpenAI's stand-in for "practically impossible" (JSON has no -inf)


@dataclass(frozen=True)
class ModelCard:
    """What /v1/models tells about the loaded model (copied, safe to read from any thread)."""

    id: str
    max_context: int
    device: str
    device_label: str
    layout: str
    default_mode: str
    max_chars: int | None = None  # the most text the context can hold (request_limits.py)
    parallel: int = 1  # requests decoded together (--parallel)
    vocab_size: int = 0  # logits per token (the ids logit_bias may name)
    backend: BackendCard | None = None  # what the engine measures (the model entry shows it)


class EngineWorker:
    def __init__(
        self,
        engine: Engine,
        default_mode: str,
        served_name: str | None = None,
        max_queue: int = 16,
        log: Callable[[str], None] | None = None,
        parallel: int = 1,
        kv_budget: int | None = None,
        service: EngineService | None = None,
        closed_message: str = "The server is shutting down.",
    ) -> None:
        """`kv_budget`: with `parallel` > 1, the KV positions all slots share (default: one
        context, engine/slots.py). `service`: the engine's (the window's); without it, the
        worker starts one of its own, which `close` ends. `closed_message`: the 503 of a
        request refused once the worker is closed."""
        self.engine = engine
        self.default_mode = default_mode
        self.served_name = served_name or engine.info.name
        self.max_queue = max_queue
        self.log = log or (lambda line: None)
        self.records: deque[RequestRecord] = deque(maxlen=256)
        self.counters = ServerCounters()
        self.parallel = parallel
        self.card = self._card()
        # Submitted and not finished, in order: those generating and those waiting.
        self._submitted: dict[int, ServedRequest] = {}
        self._lock = threading.Lock()
        self._active: dict[int, ServedRequest] = {}  # those generating
        self._token_text = TokenText(engine.tokenizer.tok)
        self.closed_message = closed_message
        self._slots: BatchServing[ServedRequest] | None = None
        self._own_service = service is None
        self._closed = False  # a request queued later is refused at once
        self._service = service or EngineService("chatapp-engine")
        if parallel > 1:  # EngineError where this model or device cannot batch
            try:
                batch = engine.slots(parallel, kv_budget)
            except BaseException:
                self._close_service(0.0)
                raise
            self._slots = self._service.serve_batch(batch, self.answer_turns, self._refuse)

    # ---- any thread ------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Requests submitted and not finished: the one generating and those waiting."""
        with self._lock:
            return len(self._submitted)

    @property
    def running(self) -> ServedRequest | None:
        """The request generating now (the first, with --parallel), if any."""
        with self._lock:
            return next(iter(self._active.values()), None)

    def load(self) -> Load:
        """What the server is doing now (for /health, /metrics, /slots): never waits for a
        model run."""
        with self._lock:
            submitted, running = len(self._submitted), len(self._active)
        batch = self.slot_batch
        if batch is None:
            used, capacity = self.engine.kv_positions()
            return Load(submitted - running, running, self.parallel, used, capacity, 0, 0, used)
        return Load(
            submitted - running,
            running,
            self.parallel,
            batch.held,
            batch.budget,
            batch.shared_positions,
            batch.reserved,
            batch.cached_positions,
            batch.preemptions,
            batch.recomputed,
            batch.steps,
            batch.rows,
        )

    def running_requests(self) -> list[ServedRequest]:
        """The requests generating now (a snapshot)."""
        with self._lock:
            return list(self._active.values())

    @property
    def slot_batch(self) -> SlotBatch | None:
        """The slots the requests decode on (None: one request at a time)."""
        return self._slots.batch if self._slots is not None else None

    def waiting_requests(self) -> list[ServedRequest]:
        """The requests in the queue, not those generating (a snapshot)."""
        with self._lock:
            return self._waiting_locked()

    def _waiting_locked(self) -> list[ServedRequest]:
        return [r for r in self._submitted.values() if r.id not in self._active]

    def submit(self, request: ServedRequest) -> None:
        self.submit_all([request])

    def submit_all(self, requests: list[ServedRequest]) -> None:
        """Queue `requests` together (the choices of one request: all or none of them, in
        order, so that with --parallel they decode together)."""
        if len(requests) > self.max_queue:
            raise ApiError(
                400,
                f"This server queues at most {self.max_queue} requests (--max-queue), so it "
                f"cannot make {len(requests)} choices at once; ask for fewer (n).",
                param="n",
            )
        with self._lock:
            waiting = len(self._submitted) - len(self._active)
            if waiting + len(requests) > self.max_queue:
                retry = retry_after_s(self.records)
                raise ApiError(
                    503,
                    f"The server is busy: its queue is full ({waiting} waiting); try again "
                    f"in {retry} s.",
                    code="queue_full",
                    headers={"Retry-After": str(retry)},
                )
            for request in requests:
                self._submitted[request.id] = request
        for i, request in enumerate(requests):
            try:
                self._queue(request)
            except BaseException:
                for queued in requests[:i]:
                    queued.cancel()  # nobody will read them: they end before their first step
                for left in requests[i + 1 :]:
                    self._finished(left)
                raise

    def _queue(self, request: ServedRequest) -> None:
        if self._slots is not None:
            self._slots.submit(request)
            return
        if self._closed:
            self._refuse(request)
            return
        self._service.submit(self.job_for(request))

    def job_for(self, request: ServedRequest) -> Job:
        """The job that answers `request` on the engine's thread; stopped before it starts (the
        worker closing), it answers that the server is shutting down."""

        def run(control: JobControl) -> None:
            if control.stopped:
                self._refuse(request)
                return
            self.answer(request)

        return Job("served request", run)

    def _refuse(self, request: ServedRequest) -> None:
        with self._lock:
            if self._submitted.pop(request.id, None) is None:
                return  # refused already (by `close`)
        _send(request, Failed(ApiError(503, self.closed_message)))

    def close(self, timeout: float = 10.0) -> None:
        """Cancel what runs, then end the batch and the worker's own service once the
        requests queued before have run; those submitted later are refused
        (`closed_message`), and so are those waiting on a service the worker does not own."""
        with self._lock:
            self._closed = True
            active = list(self._active.values())
            waiting = [] if self._own_service else self._waiting_locked()
        for request in active:
            request.cancel()
        for request in waiting:
            self._refuse(request)
        if self._slots is not None:
            self._slots.close(timeout)
        self._close_service(timeout)

    def _close_service(self, timeout: float) -> None:
        if self._own_service:
            self._service.close(timeout)

    # ---- the thread that owns the engine -----------------------------------------------
    def answer(self, request: ServedRequest) -> None:
        """Answer one request on the calling thread, which must be the engine's owner; not one
        `close` refused."""
        for _ in self.answer_turns(request, None):  # the engine's own loop yields no turn
            pass

    def answer_turns(
        self, request: ServedRequest, slot: SlotLoop | None
    ) -> Generator[Turn, None, None]:
        """`answer` as a task of the batch's loop (engine/batch_loop.py), on `slot`: it
        yields where it waits for the batched step or for room."""
        with self._lock:
            if request.id not in self._submitted:
                return
            self._active[request.id] = request  # claimed: `close` leaves it be
        request.slot = slot.index if slot is not None else None
        request.started_at = perf()
        try:
            if slot is not None and request.request.answer.mode != Mode.IOBINDING:
                # Another loop runs on the engine's own cache, whole, on this thread: the
                # batch waits for it (a teaching request, not a throughput one).
                yield from self._serve(request, None)
            else:
                yield from self._serve(request, slot)
        except Exception as exc:  # a bug must not end the thread every request waits on
            traceback.print_exc(file=sys.stderr)
            _send(request, Failed(ApiError(500, f"Internal error: {first_line(exc)}")))
        finally:
            with self._lock:
                self._active.pop(request.id, None)
            self._finished(request)

    def _finished(self, request: ServedRequest) -> None:
        with self._lock:
            self._submitted.pop(request.id, None)

    def _serve(
        self, served: ServedRequest, slot: SlotLoop | None = None
    ) -> Generator[Turn, None, None]:
        """HTTP <-> events: the request answered by session/answer.py (on `slot`, with
        --parallel: its turns yielded to the batch's loop), its events as the client's
        Started, Deltas and Done (or Failed)."""
        started = perf()
        if served.cancelled.is_set():  # the client left while waiting
            _send(served, Failed(ApiError(499, "The client closed the request.")))
            self._record(served, started, "cancelled", 0)
            self.counters.ended_early("cancelled", 0)
            return
        backend = self.engine if slot is None else self.engine.slot_context(slot)
        stats: RunStats | None = None
        done: AnswerDone | None = None
        try:
            for event in answer_turns(backend, served.request.answer, served.cancelled.is_set):
                sent = True
                if isinstance(event, Turn):
                    yield event
                    continue
                if isinstance(event, Opened):
                    stats = event.stats
                    served.prompt_tokens = event.prompt_tokens
                    sent = _send(served, Started(event.prompt_tokens))
                elif isinstance(event, TextDelta):
                    served.generated_tokens += len(event.tokens)
                    sent = _send(served, Delta(event.text, self._token_outs(event.tokens)))
                elif isinstance(event, ToolPiece):
                    served.generated_tokens += len(event.tokens)
                    sent = _send(served, Delta("", self._token_outs(event.tokens), event.piece))
                elif isinstance(event, AnswerDone):
                    done = event
                if not sent:
                    served.cancel()
        except SlotStopped:  # pre-empted, and the client left (or the server stops) meanwhile
            _send(served, Failed(ApiError(499, "The client closed the request.")))
            generated = stats.generated_tokens if stats else 0
            self._record(served, started, "cancelled", generated)
            self.counters.ended_early("cancelled", generated)
            return
        except Exception as exc:
            error = _api_error(served.request, exc, opened=stats is not None)
            self._fail(served, started, stats, error)
            if isinstance(exc, DeviceFailure):
                self._fall_back_to_cpu(exc)
            return
        assert stats is not None and done is not None  # answer() ends with its AnswerDone
        finish = done.finish.openai
        figures = self._figures(stats, started - served.queued_at)
        self._record(served, started, stats.finish_reason, stats.generated_tokens)
        self.counters.answered(
            finish,
            stats.prompt_tokens,
            stats.generated_tokens,
            stats.ttft_s,
            stats.decode_s,
            started - served.queued_at,
        )
        self.counters.speculated(stats.drafted_tokens, stats.accepted_tokens)
        gone = served.cancelled.is_set()  # before Done: the receiver cancels when it closes
        made = done.tool_calls
        usage = done.usage
        _send(served, Done(finish, usage.prompt_tokens, usage.completion_tokens, figures, made))
        self.log(
            f"request {served.id}: {stats.prompt_tokens} prompt + {stats.generated_tokens} tokens, "
            f"{stats.tokens_per_s:.1f} tok/s, TTFT {stats.ttft_s * 1000:.0f} ms, {stats.mode}, "
            f"{'client gone' if gone else finish}"
        )

    def _token_outs(self, tokens: tuple[TokenInfo, ...]) -> tuple[TokenOut, ...]:
        return tuple(self._token_out(t) for t in tokens)

    def _token_out(self, event: TokenInfo) -> TokenOut:
        token, raw = self._token_text(event.token_id if event.token_id is not None else -1)
        top = tuple((*self._token_text(i), _floor(lp)) for i, lp in event.top_logprobs)
        return TokenOut(token, raw, _floor(event.logprob), top)

    def _fail(
        self, served: ServedRequest, started: float, stats: RunStats | None, error: ApiError
    ) -> None:
        _send(served, Failed(error))
        generated = stats.generated_tokens if stats else 0
        self._record(served, started, "error", generated)
        self.counters.ended_early("error", generated)
        self.log(f"request {served.id}: failed: {error.message}")

    def _fall_back_to_cpu(self, failure: DeviceFailure) -> None:
        try:
            fall_back_to_cpu(self.engine, failure)
        except Exception as exc:
            self.log(f"the model could not be restarted on the CPU: {first_line(exc)}")
        self.card = self._card()

    def _record(self, served: ServedRequest, started: float, reason: str, tokens: int) -> None:
        record = RequestRecord(
            served.id, served.queued_at, started, perf(), reason, tokens, served.cancelled.is_set()
        )
        self.records.append(record)

    def _figures(self, stats: RunStats, queue_wait_s: float) -> dict[str, Any]:
        data = stats.to_dict()
        for bulky in ("latencies_s", "steps", "token_ids", "transfer", "mode", "finish_reason"):
            data.pop(bulky)
        return {
            "loop": stats.mode,
            **data,
            "device_label": self.engine.device.label,
            **stats.transfer(),
            "queue_wait_s": queue_wait_s,
            "engine_finish_reason": stats.finish_reason,
        }

    def _card(self) -> ModelCard:
        engine = self.engine
        return ModelCard(
            id=self.served_name,
            max_context=engine.max_context,
            device=engine.device.name,
            device_label=engine.device.label,
            layout=engine.info.layout.value,
            default_mode=self.default_mode,
            max_chars=engine.tokenizer.max_chars(engine.max_context),
            parallel=self.parallel,
            vocab_size=engine.info.vocab_size,
            backend=engine.card(),
        )


def _send(served: ServedRequest, event: RequestEvent) -> bool:
    """Deliver; False when the receiving side is gone (its event loop closed)."""
    try:
        served.deliver(event)
    except RuntimeError:
        return False
    return True


def _api_error(req: GenerationRequest, exc: Exception, opened: bool) -> ApiError:
    """What a client is told of `exc`; `opened`: raised once the answer had started."""
    param = "tools" if req.answer.tools else "response_format"
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ConstraintError):  # a schema refused, or its grammar failed mid-answer
        return ApiError(400, str(exc), param=param)
    if isinstance(exc, DeviceFailure):
        return ApiError(500, f"{exc} The next request runs on the CPU.")
    if isinstance(exc, BiasRefused):  # found at a step, but the request's own doing
        return ApiError(400, str(exc), param="logit_bias")
    if not opened:
        if isinstance(exc, ContextOverflowError):
            return ApiError(400, str(exc), param="messages", code="context_length_exceeded")
        if isinstance(exc, ModelError):  # e.g. a chat template that refuses a system message
            return ApiError(400, str(exc))
        if isinstance(exc, EngineError):
            return ApiError(500, str(exc))
        if isinstance(exc, ValueError):  # an empty prompt after tokenizing, settings
            return ApiError(400, f"{exc}.")
    traceback.print_exception(exc, file=sys.stderr)
    return ApiError(500, f"Generation failed: {first_line(exc)}")


def _floor(logprob: float) -> float:
    return logprob if logprob > LOGPROB_FLOOR else LOGPROB_FLOOR
