"""Answering a chat in the window: the generation job and the context measurement. No Qt.

The window builds its answer's `AnswerRequest` here (`answer_request`: the side panel's
options and the conversation), as the server and the CLI build theirs. The generation job is a
relay of session/answer.py (the answering path `chatapp serve` and `chatapp generate` use
too): it yields the ContextReport (what of the conversation the model
sees), the device's warm-up progress on its first answer there (WarmUpProgress), then one
TokenItem per token (a last one without a token for text held back to the end), and returns
an AnswerResult. The GUI receives them in batches and folds each batch's tokens into one
TokenBatch. The backend is the host's `Backend` (engine/backend.py): the local Engine, or a
connected server's (remote_jobs.py, with its context policy); nothing here asks which.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from chatapp.engine.backend import Backend, BackendError
from chatapp.engine.errors import DeviceFailure, EngineError
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.metrics import RunStats
from chatapp.engine.structured.constraints import ConstraintError, output_format_from_text
from chatapp.engine.structured.tool_calls import NO_TOOLS
from chatapp.engine.text.chat import Message, ToolCall
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.session.answer import (
    AnswerDone,
    AnswerRequest,
    ContextPolicy,
    Opened,
    TextDelta,
    ToolPiece,
    answer,
    measure_context,
)
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.context import ContextReport
from chatapp.session.jobs import Job, JobControl, JobResult, failed
from chatapp.session.model_jobs import EngineHost
from chatapp.session.remote_jobs import backend_message
from chatapp.session.tool_specs import ToolSpecError, choice_by_word

log = logging.getLogger(__name__)


def answer_request(
    messages: tuple[Message, ...], options: GenerationOptions, continue_last: bool = False
) -> AnswerRequest:
    """The window's request: `messages` (the system prompt, then the conversation) answered
    as the side panel decided. Raises ConstraintError (the JSON schema's text) or
    ToolSpecError (a tool choice that names no tool)."""
    output = None if options.json_schema is None else output_format_from_text(options.json_schema)
    choice = choice_by_word(options.tool_choice, options.tools) if options.tools else NO_TOOLS
    return AnswerRequest(
        messages,
        options.settings,
        options.mode,
        output_format=output,
        tools=options.tools,
        tool_choice=choice,
        stops=options.stops,
        context=ContextPolicy.TRIM,
        prompt_style=options.prompt_style,
        continue_last=continue_last,
    )


@dataclass(frozen=True)
class TokenItem:
    """One token as it streams; a last item without a token carries text the detokenizer
    held back until the end (a partial character)."""

    index: int
    text: str
    token_id: int | None = None
    latency_s: float | None = None  # the first token's is its time to first token


@dataclass(frozen=True)
class TokenBatch:
    """The tokens of one flush, joined."""

    request_id: int
    first_index: int  # index of the first token in this batch
    text: str
    token_ids: tuple[int, ...]
    latencies_s: tuple[float, ...]

    @classmethod
    def join(cls, request_id: int, items: Sequence[TokenItem]) -> TokenBatch:
        return cls(
            request_id,
            items[0].index,
            "".join(i.text for i in items),
            tuple(i.token_id for i in items if i.token_id is not None),
            tuple(i.latency_s for i in items if i.latency_s is not None),
        )


@dataclass(frozen=True)
class StatsSnapshot:
    """The running figures of an answer, copied on the worker thread at a flush."""

    request_id: int
    figures: AnswerFigures
    # The backend's own figures of the answer, where it sends them (a chatapp server's loop,
    # device, transfers).
    server_figures: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, request_id: int, stats: RunStats) -> StatsSnapshot:
        server = stats.server_figures
        return cls(request_id, answer_figures(stats), dict(server) if server else None)


def answer_figures(stats: RunStats, finish_reason: str | None = None) -> AnswerFigures:
    """The record of an answer: what the backend cannot measure is left out (None, not 0: a
    server's transfers, prompt perplexity, reused tokens, and the prompt's size when it sends
    no usage), and the model is named where the backend names it (a server's)."""
    figures = AnswerFigures.from_stats(stats, finish_reason)
    unknown = {name: None for name in stats.unmeasured if name in AnswerFigures.names()}
    if not unknown and not stats.model:
        return figures
    return replace(figures, model=stats.model or figures.model, **unknown)


@dataclass(frozen=True)
class AnswerResult:
    text: str
    stats: RunStats  # a private copy, safe to read in the GUI thread
    # Made on the worker, so that figures that fail fail the job (one error event), never a
    # GUI slot: the last snapshot (a chatapp server sends its own at the end) and the record.
    final: StatsSnapshot
    figures: AnswerFigures
    tool_calls: tuple[ToolCall, ...] = ()  # kept structured; the transcript shows them


def generate_job(host: EngineHost, request: AnswerRequest) -> Job:
    """The window's answer: a relay of session/answer.py's events as the GUI's items."""

    def run(
        control: JobControl,
    ) -> Generator[ContextReport | WarmUpProgress | TokenItem, None, AnswerResult]:
        backend: Backend = host.backend()
        asked = replace(request, request_id=control.request_id)  # the report's
        for event in answer(backend, asked, lambda: control.stopped):
            if isinstance(event, ContextReport | WarmUpProgress):
                yield event
                control.flush()
            elif isinstance(event, Opened):
                control.snapshot = partial(StatsSnapshot.of, control.request_id, event.stats)
                control.partial = event.stats
            elif isinstance(event, TextDelta):
                yield from _items(event)
                if any(t.index == 0 for t in event.tokens):
                    control.flush()  # the first token goes out at once: it is the TTFT
            elif isinstance(event, ToolPiece):  # shown whole at the end; its tokens count now
                yield from _items(TextDelta("", event.tokens, 0))
            elif isinstance(event, AnswerDone):
                stats = copy.deepcopy(event.stats)
                final = StatsSnapshot.of(control.request_id, stats)  # may fail: partial kept
                figures = answer_figures(stats, event.finish.value)
                result = AnswerResult(event.text, stats, final, figures, event.tool_calls)
                control.partial = None
                return result
        raise EngineError("The answer ended without its figures.")  # answer() always ends so

    return Job("generation", run, _explain_generation, (EngineError, ValueError))


def window_job(
    host: EngineHost,
    messages: tuple[Message, ...],
    options: GenerationOptions,
    continue_last: bool = False,
) -> Job:
    """The window's answer to `messages` as the side panel decided. The request is made on the
    worker (a JSON schema is checked there, off the GUI thread); one that cannot be made (its
    schema, its tool choice) fails as an answer does."""

    def run(control: JobControl) -> JobResult:
        request = answer_request(messages, options, continue_last)
        return generate_job(host, request).run(control)

    return Job("generation", run, _explain_generation, (EngineError, ValueError))


def _items(delta: TextDelta) -> Iterator[TokenItem]:
    """A delta as token items: the text on the first (its tokens keep their ids and
    latencies); text whose tokens are still held comes in an item of its own."""
    if not delta.tokens:
        if delta.text:
            yield TokenItem(delta.index, delta.text)
        return
    for i, t in enumerate(delta.tokens):
        yield TokenItem(t.index, delta.text if i == 0 else "", t.token_id, t.latency_s)


def _explain_generation(exc: BaseException) -> str:
    if isinstance(exc, DeviceFailure):  # the controller then restarts the model on the CPU
        return f"{exc} The next answer runs on the CPU."
    if isinstance(exc, BackendError):
        return backend_message(exc)
    if isinstance(exc, EngineError | ConstraintError):  # a JSON answer's schema, too
        return str(exc)
    if isinstance(exc, ToolSpecError):  # the Tools option's choice names no tool
        return exc.message
    if isinstance(exc, ValueError):  # SamplingSettings.validate
        return f"Invalid sampling settings: {exc}."
    return failed("Generation", exc)


def failed_figures(stats: RunStats) -> AnswerFigures:
    """A failed answer's figures, marked "error"; only that where they are what failed."""
    try:
        return answer_figures(stats, "error")
    except Exception:
        log.exception("the figures of a failed answer failed too")
        return AnswerFigures(finish_reason="error")


def failure_stats(partial: object) -> RunStats | None:
    """The figures of an answer that failed midway (from JobError.partial), marked "error"."""
    if not isinstance(partial, RunStats):
        return None
    stats = copy.deepcopy(partial)
    stats.finish_reason = "error"
    return stats


def measured_request(messages: tuple[Message, ...], options: GenerationOptions) -> AnswerRequest:
    """The request the next answer would send, for the context measure: the JSON answer adds
    no prompt text, and a tool choice that names no tool counts as no tools (the answer then
    says why)."""
    options = replace(options, json_schema=None)
    try:
        return answer_request(messages, options)
    except ToolSpecError:
        return answer_request(messages, replace(options, tools=()))


def measure_context_job(host: EngineHost, request: AnswerRequest) -> Job:
    """What the context policy would send of `request` now (no answer is generated); returns a
    ContextReport, or None before a model is loaded."""

    def run(control: JobControl) -> ContextReport | None:
        if host.engine is None:
            return None
        backend: Backend = host.backend()
        if backend.chat_tokenizer is None:  # a server's tokens are not known
            return None
        return measure_context(backend, replace(request, request_id=control.request_id))

    # A template that rejects the messages: the answer will say so; the log keeps it.
    return Job("context measurement", run, lambda exc: failed("Counting tokens", exc))
