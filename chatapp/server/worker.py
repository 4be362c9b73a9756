"""The one thread that owns the Engine: requests wait in a queue and run one at a time.

The engine is single-stream (one KV cache per loop), so two generations must never overlap.
The HTTP side hands in a `ServedRequest` with a `deliver` callback (thread-safe, e.g. onto an
asyncio queue) and gets back `Started`, then `Delta`s, then `Done` or `Failed`. A request
whose `cancelled` flag is set (the client went away) stops within one step of the loop.

By default each request is answered by a `Job` (session/jobs.py) on the worker's own
`JobThread`, the way the window runs its jobs. With `dispatch`, it starts no thread: `submit`
hands each request to `dispatch` (from the HTTP thread), and whoever owns the engine calls
`answer(request)` on its own thread, or `discard(request, error)` for one that will never run
(the window's "Serve this model" answers on its JobRunner, between chat answers).
"""

from __future__ import annotations

import builtins
import itertools
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from chatapp.engine.chat import ToolCall
from chatapp.engine.constraints import ConstraintError
from chatapp.engine.engine import Engine
from chatapp.engine.errors import ContextOverflowError, DeviceFailure, EngineError, ModelError
from chatapp.engine.generation import Generation, StepEvent
from chatapp.engine.metrics import RunStats
from chatapp.engine.stops import StopBuffer
from chatapp.engine.tool_calls import ToolPlan
from chatapp.engine.tool_stream import StreamPiece, ToolCallStream
from chatapp.error_text import first_line
from chatapp.server.errors import ApiError
from chatapp.server.request_body import GenerationRequest
from chatapp.server.token_text import TokenText
from chatapp.session.jobs import Job, JobControl, JobThread

perf = time.perf_counter
LOGPROB_FLOOR = -9999.0  # OpenAI's stand-in for "practically impossible" (JSON has no -inf)


@dataclass(frozen=True)
class TokenOut:
    token: str
    bytes: bytes
    logprob: float
    top: tuple[tuple[str, builtins.bytes, float], ...]  # most likely first


@dataclass(frozen=True)
class Started:
    prompt_tokens: int


@dataclass(frozen=True)
class Delta:
    text: str
    tokens: tuple[TokenOut, ...]
    tool: StreamPiece | None = None  # a tool call's start or more of its arguments


@dataclass(frozen=True)
class Done:
    finish_reason: str  # OpenAI's: stop | length | tool_calls
    prompt_tokens: int
    completion_tokens: int
    figures: dict[str, Any]  # the `chatapp` extension field
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Failed:
    error: ApiError


RequestEvent = Started | Delta | Done | Failed


@dataclass
class ServedRequest:
    """One HTTP request for the engine, with the way back to its client."""

    request: GenerationRequest
    deliver: Callable[[RequestEvent], object]  # its return value is ignored
    id: int = field(default_factory=itertools.count(1).__next__)
    cancelled: threading.Event = field(default_factory=threading.Event)
    queued_at: float = field(default_factory=perf)

    def cancel(self) -> None:
        self.cancelled.set()


@dataclass(frozen=True)
class RequestRecord:
    """What became of a request (kept for the log and the tests)."""

    id: int
    queued_at: float
    started_at: float
    finished_at: float
    engine_finish_reason: str  # eos | length | stop | error | cancelled (before it started)
    generated_tokens: int
    cancelled: bool


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


class EngineWorker:
    def __init__(
        self,
        engine: Engine,
        default_mode: str,
        served_name: str | None = None,
        max_queue: int = 16,
        log: Callable[[str], None] | None = None,
        dispatch: Callable[[ServedRequest], None] | None = None,
    ) -> None:
        self.engine = engine
        self.default_mode = default_mode
        self.served_name = served_name or engine.info.name
        self.max_queue = max_queue
        self.log = log or (lambda line: None)
        self.records: deque[RequestRecord] = deque(maxlen=256)
        self.card = self._card()
        # Submitted and not finished, in order: the one generating and those waiting.
        self._submitted: dict[int, ServedRequest] = {}
        self._lock = threading.Lock()
        self._current: ServedRequest | None = None
        self._token_text = TokenText(engine.tokenizer.tok)
        self._dispatch = dispatch
        self._thread = JobThread("chatapp-engine") if dispatch is None else None

    # ---- any thread ------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Requests submitted and not finished: the one generating and those waiting."""
        with self._lock:
            return len(self._submitted)

    @property
    def running(self) -> ServedRequest | None:
        """The request generating now, if any."""
        return self._current

    def waiting_requests(self) -> list[ServedRequest]:
        """The requests in the queue, not the one generating (a snapshot)."""
        with self._lock:
            current = self._current
            return [r for r in self._submitted.values() if r is not current]

    def submit(self, request: ServedRequest) -> None:
        with self._lock:
            if len(self._submitted) >= self.max_queue:
                raise ApiError(
                    503,
                    f"The server is busy: {len(self._submitted)} requests are waiting; "
                    "try again later.",
                    code="queue_full",
                )
            self._submitted[request.id] = request
        if self._dispatch is None:
            assert self._thread is not None
            self._thread.submit(self.job_for(request))
            return
        try:
            self._dispatch(request)
        except BaseException:
            self._finished(request)
            raise

    def job_for(self, request: ServedRequest) -> Job:
        """The job that answers `request` on the engine's thread; stopped before it starts (the
        worker closing), it answers that the server is shutting down."""

        def run(control: JobControl) -> None:
            if control.stopped:
                _send(request, Failed(ApiError(503, "The server is shutting down.")))
                self._finished(request)
                return
            self.answer(request)

        return Job("served request", run)

    def close(self, timeout: float = 10.0) -> None:
        """Cancel what runs, then end the thread (if the worker has one) once the requests
        queued before have run; those submitted later are told the server is shutting down."""
        current = self._current
        if current is not None:
            current.cancel()
        if self._thread is not None:
            self._thread.close(timeout)

    # ---- the thread that owns the engine -----------------------------------------------
    def answer(self, request: ServedRequest) -> None:
        """Answer one request on the calling thread, which must be the engine's owner."""
        self._current = request
        try:
            self._serve(request)
        except Exception as exc:  # a bug must not end the thread every request waits on
            traceback.print_exc(file=sys.stderr)
            _send(request, Failed(ApiError(500, f"Internal error: {first_line(exc)}")))
        finally:
            self._current = None
            self._finished(request)

    def discard(self, request: ServedRequest, error: ApiError) -> None:
        """Answer a dispatched request that will never run (the owner stops serving)."""
        _send(request, Failed(error))
        self._finished(request)

    def _finished(self, request: ServedRequest) -> None:
        with self._lock:
            self._submitted.pop(request.id, None)

    def _serve(self, served: ServedRequest) -> None:
        started = perf()
        if served.cancelled.is_set():  # the client left while waiting
            _send(served, Failed(ApiError(499, "The client closed the request.")))
            self._record(served, started, "cancelled", 0)
            return
        stops: StopBuffer[TokenOut | None] = StopBuffer(served.request.stop)
        stats: RunStats | None = None
        plan = self._tool_plan(served.request)
        calls = plan.stream() if plan is not None and plan.active else None
        try:
            gen = self._open(served, lambda: stops.stopped or served.cancelled.is_set(), plan)
            stats = gen.stats
            if not _send(served, Started(len(gen.prompt_ids))):
                served.cancel()
            streamed = ""
            for event in gen:
                streamed += event.text
                self._push(served, stops, event.text, self._token_out(event), calls)
            if gen.text.startswith(streamed) and len(gen.text) > len(streamed):
                # The detokenizer's last partial character comes out at the end.
                self._push(served, stops, gen.text[len(streamed) :], None, calls)
            text, items = stops.flush()
            self._deliver(served, text, tuple(t for t in items if t is not None), calls)
            if calls is not None:
                for piece in calls.finish():
                    _send(served, _piece_delta(piece, ()))
        except ApiError as exc:
            self._fail(served, started, stats, exc)
            return
        except ConstraintError as exc:  # the schema's grammar failed mid-answer: still its fault
            param = "tools" if served.request.tools else "response_format"
            self._fail(served, started, stats, ApiError(400, str(exc), param=param))
            return
        except DeviceFailure as exc:
            self._fail(
                served, started, stats, ApiError(500, f"{exc} The next request runs on the CPU.")
            )
            self._fall_back_to_cpu(exc)
            return
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self._fail(
                served, started, stats, ApiError(500, f"Generation failed: {first_line(exc)}")
            )
            return
        assert stats is not None
        finish = "stop" if stops.stopped or stats.finish_reason != "length" else "length"
        made = calls.calls() if calls is not None else ()
        if made and finish == "stop":
            finish = "tool_calls"
        figures = self._figures(stats, started - served.queued_at)
        self._record(served, started, stats.finish_reason, stats.generated_tokens)
        gone = served.cancelled.is_set()  # before Done: the receiver cancels when it closes
        _send(served, Done(finish, stats.prompt_tokens, stats.generated_tokens, figures, made))
        self.log(
            f"request {served.id}: {stats.prompt_tokens} prompt + {stats.generated_tokens} tokens, "
            f"{stats.tokens_per_s:.1f} tok/s, TTFT {stats.ttft_s * 1000:.0f} ms, {stats.mode}, "
            f"{'client gone' if gone else finish}"
        )

    def _tool_plan(self, req: GenerationRequest) -> ToolPlan | None:
        """The request's tools, or its history's calls and results, as the model sees them."""
        messages = req.messages or ()
        if not req.tools and not any(m.role == "tool" or m.tool_calls for m in messages):
            return None
        tokenizer = self.engine.tokenizer
        return ToolPlan(
            req.tools, req.tool_choice, tokenizer.template_source, tokenizer.supports_tools
        )

    def _open(
        self, served: ServedRequest, should_stop: Callable[[], bool], plan: ToolPlan | None
    ) -> Generation:
        req = served.request
        try:
            if req.messages is not None:
                if plan is None:
                    messages, tools, output = list(req.messages), None, req.output_format
                else:
                    messages, tools = plan.messages(req.messages), plan.template_tools()
                    output = plan.output_format(req.output_format) or req.output_format
                return self.engine.chat(
                    messages,
                    req.settings,
                    req.mode,
                    should_stop,
                    req.top_logprobs,
                    output_format=output,
                    tools=tools,
                )
            ids = self.engine.tokenizer.encode(req.text or "")
            return self.engine.generate_ids(
                ids, req.settings, req.mode, should_stop, top_logprobs=req.top_logprobs
            )
        except ContextOverflowError as exc:
            raise ApiError(400, str(exc), param="messages", code="context_length_exceeded") from exc
        except ModelError as exc:  # e.g. a chat template that refuses a system message
            raise ApiError(400, str(exc)) from exc
        except DeviceFailure:
            raise
        except ConstraintError as exc:  # a schema the grammar library refuses
            param = "tools" if req.tools else "response_format"
            raise ApiError(400, str(exc), param=param) from exc
        except EngineError as exc:
            raise ApiError(500, str(exc)) from exc
        except ValueError as exc:  # an empty prompt after tokenizing, settings
            raise ApiError(400, f"{exc}.") from exc

    def _push(
        self,
        served: ServedRequest,
        stops: StopBuffer[TokenOut | None],
        text: str,
        token: TokenOut | None,
        calls: ToolCallStream | None,
    ) -> None:
        released, items = stops.push(text, token)
        if not self._deliver(served, released, tuple(t for t in items if t is not None), calls):
            served.cancel()

    def _deliver(
        self,
        served: ServedRequest,
        text: str,
        tokens: tuple[TokenOut, ...],
        calls: ToolCallStream | None,
    ) -> bool:
        """Send text as content, or (with tools) as content or tool call pieces."""
        if calls is None:
            return not (text or tokens) or _send(served, Delta(text, tokens))
        pieces = calls.push(text) if text else []
        if not pieces:
            return not tokens or _send(served, Delta("", tokens))
        sent = True
        for i, piece in enumerate(pieces):
            sent = _send(served, _piece_delta(piece, tokens if i == 0 else ())) and sent
        return sent

    def _token_out(self, event: StepEvent) -> TokenOut:
        token, raw = self._token_text(event.token_id)
        top = tuple((*self._token_text(i), _floor(lp)) for i, lp in event.top_logprobs)
        return TokenOut(token, raw, _floor(event.logprob), top)

    def _fail(
        self, served: ServedRequest, started: float, stats: RunStats | None, error: ApiError
    ) -> None:
        _send(served, Failed(error))
        self._record(served, started, "error", stats.generated_tokens if stats else 0)
        self.log(f"request {served.id}: failed: {error.message}")

    def _fall_back_to_cpu(self, failure: DeviceFailure) -> None:
        try:
            self.engine.fall_back_to_cpu(f"{failure} Running on the CPU.")
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
        )


def _send(served: ServedRequest, event: RequestEvent) -> bool:
    """Deliver; False when the receiving side is gone (its event loop closed)."""
    try:
        served.deliver(event)
    except RuntimeError:
        return False
    return True


def _piece_delta(piece: StreamPiece, tokens: tuple[TokenOut, ...]) -> Delta:
    if piece.call_id is None and piece.arguments is None:
        return Delta(piece.content, tokens)
    return Delta("", tokens, piece)


def _floor(logprob: float) -> float:
    return logprob if logprob > LOGPROB_FLOOR else LOGPROB_FLOOR
