"""Answering: the one path the window, `chatapp serve` and `chatapp generate` answer through. No Qt.

`answer(backend, request, should_stop)` is a generator of typed events:

- `ContextReport`: what of the conversation the model sees (policy TRIM, a local model);
- `WarmUpProgress`: the device compiling its programs on its first answer;
- `Opened`: the answer started (its prompt's size; `stats` fills in as it runs);
- `TextDelta`: text released, with the tokens it came from (the detokenizer's tail included);
- `ToolPiece`: a tool call's start or more of its arguments (a request with tools);
- `AnswerDone`: the text shown, the figures, why it ended (`FinishReason`), the usage, the
  tool calls.

`AnswerRequest` is the one request every face builds (the window's session, the server, the
CLI): the prompt style is part of it, so rendering is a function of the request alone, never of
what another answer on the same model asked before.

Stop strings (engine/text/stops.py) and tool calls (engine/structured/tool_stream.py) are
applied here, for every caller. The backend is a `Backend` (engine/backend.py): what it can do
is read from its capabilities. After a device failure, `fall_back_to_cpu` asks the model's
owner for it on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from chatapp.engine.backend import AnswerStream, Backend, BackendError, TokenEvent
from chatapp.engine.errors import DeviceFailure, EngineError
from chatapp.engine.generation import Generation
from chatapp.engine.loops import Turn as Turn  # re-exported: a batched answer's turns
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.structured.constraints import ConstraintError, OutputFormat
from chatapp.engine.structured.tool_calls import NO_TOOLS, Tool, ToolChoice, ToolPlan
from chatapp.engine.structured.tool_stream import StreamPiece, ToolCallStream
from chatapp.engine.text.chat import STYLE_CONTINUE, STYLE_TEMPLATE, Message, ToolCall
from chatapp.engine.text.stops import StopBuffer
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.session.context import ContextReport, counter_for, fit_messages
from chatapp.session.prompt_style import answer_stops

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine

JSON_NOT_HERE = (
    "JSON answer works with a model run here, not a server: turn it off to ask the server."
)
TOOLS_NOT_HERE = "Tools work with a model run here, not a server: clear them to ask the server."
WARM_UP_STOPPED = (
    "Stopped while the device was being prepared; the question is back in the prompt box."
)


class FinishReason(StrEnum):
    """Why an answer ended, once for every face (the record keeps the value)."""

    EOS = "eos"  # the model ended it
    LENGTH = "length"  # the token limit
    STOP = "stop"  # the caller stopped it (Stop, a client gone)
    STOP_STRING = "stop_string"  # one of the request's stop strings
    TOOL_CALLS = "tool_calls"  # the answer is a call (as OpenAI says)

    @property
    def openai(self) -> str:
        """As the OpenAI API says it: stop | length | tool_calls."""
        if self in (FinishReason.LENGTH, FinishReason.TOOL_CALLS):
            return self.value
        return "stop"


STOP_STRING = FinishReason.STOP_STRING.value
TOOL_CALLS = FinishReason.TOOL_CALLS.value


class ContextPolicy(StrEnum):
    TRIM = "trim"  # the oldest turns that no longer fit are not sent (the window)
    REFUSE = "refuse"  # a prompt that does not fit is an error (the server, `generate`)


@dataclass(frozen=True)
class AnswerRequest:
    """One answer to make: a chat (`messages`) or a raw text to continue (`text`)."""

    messages: tuple[Message, ...]
    settings: SamplingSettings
    mode: str | None = None  # the loop; ignored by a backend that does not choose loops
    text: str | None = None  # a raw prompt to continue instead of the chat (no template)
    # How `text` becomes tokens: parsing special tokens (an API's prompt) or as a person's text
    # with BOS first (`generate --raw`).
    text_by_person: bool = False
    output_format: OutputFormat | None = None
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = NO_TOOLS
    stops: tuple[str, ...] = ()  # the answer ends before the first of these (not shown)
    context: ContextPolicy = ContextPolicy.REFUSE
    prompt_style: str = STYLE_TEMPLATE  # engine/text/chat.py PROMPT_STYLES (a server: its own)
    continue_last: bool = False  # the last message is an answer to go on with (Continue)
    top_logprobs: int = 0
    request_id: int = 0  # the ContextReport's


@dataclass(frozen=True)
class Opened:
    prompt_tokens: int  # as the backend counts them before the answer (a server: 0)
    stats: RunStats  # the running figures (filled in as the answer runs)


@dataclass(frozen=True)
class TokenInfo:
    index: int
    token_id: int | None  # None where not known (a server sends text)
    logprob: float
    latency_s: float  # the first token's is its time to first token
    top_logprobs: tuple[tuple[int, float], ...] = ()

    @classmethod
    def of(cls, event: TokenEvent) -> TokenInfo:
        token_id = event.token_id if event.token_id >= 0 else None
        return cls(event.index, token_id, event.logprob, event.latency_s, event.top_logprobs)


@dataclass(frozen=True)
class TextDelta:
    """Text released (up to a stop string), with the tokens it completes; either may be empty.
    `index`: where text without a token of its own goes (the next token's index)."""

    text: str
    tokens: tuple[TokenInfo, ...]
    index: int


@dataclass(frozen=True)
class ToolPiece:
    piece: StreamPiece
    tokens: tuple[TokenInfo, ...]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class AnswerDone:
    text: str  # the content as shown (without a stop string, without tool calls)
    stats: RunStats  # the backend's: its finish_reason is the engine's (eos | length | stop)
    finish: FinishReason  # the answer's, for every face: nobody patches the stats
    usage: Usage
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def stopped_by_string(self) -> bool:
        return self.finish is FinishReason.STOP_STRING


AnswerEvent = ContextReport | WarmUpProgress | Opened | TextDelta | ToolPiece | AnswerDone


def answer(
    backend: Backend, request: AnswerRequest, should_stop: Callable[[], bool]
) -> Generator[AnswerEvent, None, None]:
    """The events of one answer; errors are raised as they happen (an `Opened` tells a caller
    the answer had started)."""
    for event in answer_turns(backend, request, should_stop):
        if isinstance(event, Turn):
            raise EngineError("An answer on a slot of a batch runs in the batch's loop.")
        yield event


def answer_turns(
    backend: Backend, request: AnswerRequest, should_stop: Callable[[], bool]
) -> Generator[AnswerEvent | Turn, None, None]:
    """`answer`, and the `Turn`s of an answer on a slot of a batch (engine/generation.py
    `turns()`), for the batch's loop that runs it (server/worker.py)."""
    caps = backend.capabilities
    tokenizer = backend.chat_tokenizer
    if request.output_format is not None and not caps.constrains_output:
        raise ConstraintError(JSON_NOT_HERE)
    if request.tools and not caps.calls_tools:
        raise EngineError(TOOLS_NOT_HERE)
    if request.continue_last and not caps.continues_answers:
        raise EngineError(
            "Continue works with a model run here; a server starts a new answer: use "
            "Regenerate or ask again."
        )
    if tokenizer is not None and request.text is None:
        # One base-model policy for the window, `generate` and `serve`: a chat sent to a model
        # without a template as User: / Assistant: lines ends where it starts a turn itself.
        ends = answer_stops(request.stops, request.prompt_style, tokenizer.has_template)
        request = replace(request, stops=ends)
    if request.prompt_style == STYLE_CONTINUE and request.settings.min_new_tokens < 1:
        # Send asks for what follows the text: a base model often takes a finished sentence as
        # the end of its document, and an end-of-text first would answer nothing at all.
        request = replace(request, settings=replace(request.settings, min_new_tokens=1))
    messages: Sequence[Message] = request.messages
    # One plan for the count and the answer: the turns a cut leaves out hold no tools of the
    # request's, and a plan without tools leaves calls-free turns as they are.
    plan = _tool_plan(backend, request)
    if request.context is ContextPolicy.TRIM and caps.counts_tokens and request.text is None:
        messages, report = _fit(backend, request, plan)
        yield report
    mode = request.mode if caps.chooses_loop else None
    if backend.needs_warm_up(mode):
        # The device's first runs compile its programs: a phase of their own, ahead of the
        # answer, so its TTFT and tokens/s are the model's (engine/warm_up.py).
        for progress in backend.warm_up(mode):
            yield progress
            if should_stop() and not progress.finished:  # the next answer warms up
                raise EngineError(WARM_UP_STOPPED)
    stops: StopBuffer[TokenInfo | None] = StopBuffer(request.stops)
    calls = plan.stream() if plan is not None and plan.active else None
    gen = _open(backend, request, messages, mode, plan, lambda: should_stop() or stops.stopped)
    stats = gen.stats
    yield Opened(stats.prompt_tokens, stats)
    shown: list[str] = []
    index = tokens = 0
    for event in gen.turns() if isinstance(gen, Generation) else gen:
        if isinstance(event, Turn):
            yield event
            continue
        info = None if event.tail else TokenInfo.of(event)
        tokens += info is not None
        index = event.index + (info is not None)
        yield from _release(stops.push(event.text, info), index, shown, calls)
    if tokens == 0 and stats.finish_reason == "stop" and not caps.counts_tokens:
        # Stopped while a server was silent: nothing to keep, the question goes back.
        raise BackendError(
            f"Stopped before {backend.answerer} sent anything; the question is back in the "
            "prompt box."
        )
    yield from _release(stops.flush(), index, shown, calls)
    made: tuple[ToolCall, ...] = ()
    if calls is not None:
        for piece in calls.finish():
            yield from _pieces([piece], (), index, shown)
        made = tuple(calls.calls())
    usage = Usage(stats.prompt_tokens, stats.generated_tokens)
    yield AnswerDone("".join(shown), stats, finish_reason(stats, stops.stopped, made), usage, made)


def finish_reason(stats: RunStats, by_string: bool, calls: Sequence[ToolCall]) -> FinishReason:
    """A cut answer is "length" even where a call had started (it may be incomplete, and
    Continue can finish it); a call otherwise wins over the stop string that ended it."""
    engine = stats.finish_reason
    if engine == FinishReason.LENGTH and not by_string:
        return FinishReason.LENGTH
    if calls:
        return FinishReason.TOOL_CALLS
    if by_string:
        return FinishReason.STOP_STRING
    return FinishReason.EOS if engine == FinishReason.EOS else FinishReason.STOP


def measure_context(backend: Backend, request: AnswerRequest) -> ContextReport:
    """What of the chat `request` would send (the window's context policy), counted as its
    answer counts it; nothing is generated."""
    return _fit(backend, request, _tool_plan(backend, request))[1]


def _fit(
    backend: Backend, request: AnswerRequest, plan: ToolPlan | None
) -> tuple[list[Message], ContextReport]:
    messages, report = fit_messages(
        request.request_id,
        request.messages,
        counter_for(backend, request.prompt_style, plan),
        backend.max_context,
        request.settings.max_new_tokens,
    )
    return messages, replace(report, model=backend.answerer)


def _tool_plan(backend: Backend, request: AnswerRequest) -> ToolPlan | None:
    """How the request's tools (or its history's calls and results) reach the model in its
    prompt style; None: a raw text, no tools, or no tokenizer here."""
    tokenizer = backend.chat_tokenizer
    if request.text is not None or tokenizer is None:
        return None
    tools, style = request.tools, request.prompt_style
    if not tools and not any(m.role == "tool" or m.tool_calls for m in request.messages):
        return None
    source, native = tokenizer.source_of(style), tokenizer.tools_in_template(style)
    return ToolPlan(tools, request.tool_choice, source, native)


def _open(
    backend: Backend,
    request: AnswerRequest,
    messages: Sequence[Message],
    mode: str | None,
    plan: ToolPlan | None,
    should_stop: Callable[[], bool],
) -> AnswerStream:
    tokenizer = backend.chat_tokenizer
    if request.text is not None and tokenizer is not None:
        if request.text_by_person:
            ids = tokenizer.with_bos(tokenizer.encode_text(request.text))
        else:
            ids = tokenizer.encode(request.text)
        return backend.generate_ids(
            ids,
            request.settings,
            mode,
            should_stop,
            top_logprobs=request.top_logprobs,
            output_format=request.output_format,
        )
    output, tools = request.output_format, None
    if plan is not None:
        messages, tools = plan.messages(messages), plan.template_tools()
        output = plan.output_format(request.output_format) or request.output_format
    return backend.chat(
        messages,
        request.settings,
        mode,
        should_stop,
        request.top_logprobs,
        output_format=output,
        tools=tools,
        continue_last=request.continue_last,
        style=request.prompt_style,
    )


def _release(
    released: tuple[str, list[TokenInfo | None]],
    index: int,
    shown: list[str],
    calls: ToolCallStream | None,
) -> Iterator[TextDelta | ToolPiece]:
    """What a StopBuffer let through: as content, or (with tools) content and call pieces."""
    text, items = released
    tokens = tuple(t for t in items if t is not None)
    if calls is None:
        shown.append(text)
        if text or tokens:
            yield TextDelta(text, tokens, index)
        return
    pieces = calls.push(text) if text else []
    if not pieces:
        if tokens:
            yield TextDelta("", tokens, index)
        return
    yield from _pieces(pieces, tokens, index, shown)


def _pieces(
    pieces: Sequence[StreamPiece], tokens: tuple[TokenInfo, ...], index: int, shown: list[str]
) -> Iterator[TextDelta | ToolPiece]:
    for i, piece in enumerate(pieces):
        first = tokens if i == 0 else ()
        if piece.call_id is None and piece.arguments is None:
            shown.append(piece.content)
            yield TextDelta(piece.content, first, index)
        else:
            yield ToolPiece(piece, first)


def fall_back_to_cpu(engine: Engine, failure: DeviceFailure | str) -> None:
    """After `failure` mid-answer: the same local model on the CPU for the next answer, asked
    of the engine (the model's owner: Engine.fall_back_to_cpu, loaded_model's `on_cpu` says
    why). Raises what the restart raised. Every face calls this one: the window through
    model_jobs.cpu_fallback_job, the server's worker directly."""
    engine.fall_back_to_cpu(failure)
