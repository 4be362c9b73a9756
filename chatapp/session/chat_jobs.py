"""Answering a chat: the generation job and the context measurement. No Qt.

The generation job yields the ContextReport (what of the conversation the model sees), the
device's warm-up progress on its first answer there (WarmUpProgress), then one TokenItem per
token, and returns an AnswerResult. The GUI receives them in batches and folds each batch's
tokens into one TokenBatch. The backend is the host's: the local Engine, or a connected
RemoteEngine, driven the same way (remote_jobs.py has the remote context policy).
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from chatapp.engine.chat import STYLE_TEMPLATE, Message
from chatapp.engine.constraints import ConstraintError, output_format_from_text
from chatapp.engine.errors import DeviceFailure, EngineError
from chatapp.engine.figures import AnswerFigures
from chatapp.engine.generation import Generation
from chatapp.engine.metrics import RunStats
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.stops import StopBuffer
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.remote.engine import RemoteEngine, RemoteGeneration, RemoteStats
from chatapp.remote.errors import RemoteError
from chatapp.session.context import ContextReport, ContextRequest, counter_for, fit_messages
from chatapp.session.jobs import Job, JobControl, failed
from chatapp.session.model_jobs import EngineHost
from chatapp.session.remote_jobs import remote_message

STOP_STRING = "stop_string"  # an answer's finish reason when one of its stop strings ended it


@dataclass(frozen=True)
class GenerateRequest:
    messages: tuple[Message, ...]
    settings: SamplingSettings
    mode: Mode
    # "JSON answer": None off; "" any JSON object; else the JSON schema's text.
    json_schema: str | None = None
    stops: tuple[str, ...] = ()  # the answer ends before the first of these (not shown)
    prompt_style: str = STYLE_TEMPLATE  # engine/chat.py PROMPT_STYLES (a local model's)
    continue_last: bool = False  # the last message is an answer to go on with (Continue)


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
    # A chatapp server's own figures of a remote answer (its loop, device, transfers).
    server_figures: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, request_id: int, stats: RunStats) -> StatsSnapshot:
        server = stats.server_figures if isinstance(stats, RemoteStats) else None
        return cls(request_id, answer_figures(stats), dict(server) if server else None)


def answer_figures(stats: RunStats, finish_reason: str | None = None) -> AnswerFigures:
    """The record of an answer. A remote one leaves out what a client cannot measure (None,
    not 0: the transfers, prompt perplexity, reused tokens, and the prompt's size when the
    server sends no usage) and names the server's model."""
    figures = AnswerFigures.from_stats(stats, finish_reason)
    if not isinstance(stats, RemoteStats):
        return figures
    return replace(
        figures,
        model=stats.model or None,
        h2d_bytes_per_token=None,
        d2h_bytes_per_token=None,
        prompt_perplexity=None,
        reused_tokens=None,
        prompt_tokens=stats.prompt_tokens or None,
    )


@dataclass(frozen=True)
class AnswerResult:
    text: str
    stats: RunStats  # a private copy, safe to read in the GUI thread


def generate_job(host: EngineHost, request: GenerateRequest) -> Job:
    def run(
        control: JobControl,
    ) -> Generator[ContextReport | WarmUpProgress | TokenItem, None, AnswerResult]:
        engine = host.backend()
        constrained: dict[str, Any] = {}
        if request.json_schema is not None:
            if isinstance(engine, RemoteEngine):
                raise ConstraintError(
                    "JSON answer works with a model run here, not a server: turn it off to ask "
                    "the server."
                )
            constrained["output_format"] = output_format_from_text(request.json_schema)
        messages: Sequence[Message] = request.messages
        if isinstance(engine, RemoteEngine):  # a server has no tokenizer here: send all
            if request.continue_last:
                raise EngineError(
                    "Continue works with a model run here; a server starts a new answer: use "
                    "Regenerate or ask again."
                )
        else:
            engine.tokenizer.use_style(request.prompt_style)
            # Context policy: the oldest turns that no longer fit are not sent (context.py).
            messages, report = fit_messages(
                control.request_id,
                request.messages,
                counter_for(engine),
                engine.max_context,
                request.settings.max_new_tokens,
            )
            yield report
            control.flush()
        # A server's loop is its own (the side panel greys the toggle): none is sent.
        mode = None if isinstance(engine, RemoteEngine) else request.mode
        if not isinstance(engine, RemoteEngine) and engine.needs_warm_up(mode):
            # The device's first runs compile its programs: a phase of their own, ahead of
            # the answer, so its TTFT and tokens/s are the model's (engine/warm_up.py).
            for progress in engine.warm_up(mode):
                yield progress
                control.flush()
                if control.stopped and not progress.finished:  # the next answer warms up
                    raise EngineError(
                        "Stopped while the device was being prepared; the question is back in "
                        "the prompt box."
                    )
        stops: StopBuffer[TokenItem] = StopBuffer(request.stops)
        gen: Generation | RemoteGeneration
        if isinstance(engine, RemoteEngine):
            gen = engine.chat(
                messages,
                request.settings,
                mode,
                should_stop=lambda: control.stopped or stops.stopped,
            )
        else:
            gen = engine.chat(
                messages,
                request.settings,
                mode,
                should_stop=lambda: control.stopped or stops.stopped,
                continue_last=request.continue_last,
                **constrained,
            )
        stats = gen.stats
        control.snapshot = lambda: StatsSnapshot.of(control.request_id, stats)
        control.partial = stats
        streamed: list[str] = []  # as generated
        shown: list[str] = []  # as released: up to a stop string
        index = 0
        for event in gen:
            streamed.append(event.text)
            index = event.index + 1
            token_id = event.token_id if event.token_id >= 0 else None  # servers send text
            item = TokenItem(event.index, event.text, token_id, event.latency_s)
            yield from _released(stops.push(event.text, item), index, shown)
            if event.index == 0:
                control.flush()  # the first token goes out at once: it is the TTFT
        if isinstance(engine, RemoteEngine) and index == 0 and stats.finish_reason == "stop":
            # Stopped while the server was silent: nothing to keep, the question goes back.
            raise RemoteError(
                f"Stopped before {engine.server} sent anything; the question is back in the "
                "prompt box."
            )
        # The detokenizer may hold back a last partial character until the end.
        sent = "".join(streamed)
        if gen.text.startswith(sent) and len(gen.text) > len(sent):
            yield from _released(
                stops.push(gen.text[len(sent) :], TokenItem(index, "")), index, shown
            )
        yield from _released(stops.flush(), index, shown)
        control.partial = None
        if stops.stopped:
            stats.finish_reason = STOP_STRING
        return AnswerResult("".join(shown), copy.deepcopy(stats))

    return Job("generation", run, _explain_generation, (EngineError, ValueError))


def _released(
    released: tuple[str, list[TokenItem]], index: int, shown: list[str]
) -> Iterator[TokenItem]:
    """What a StopBuffer let through, as token items: the text on the first (its tokens keep
    their ids and latencies); text whose tokens are still held comes in an item of its own."""
    text, items = released
    shown.append(text)
    if not items:
        if text:
            yield TokenItem(index, text)
        return
    for i, item in enumerate(items):
        yield replace(item, text=text if i == 0 else "")


def _explain_generation(exc: BaseException) -> str:
    if isinstance(exc, DeviceFailure):  # the controller then restarts the model on the CPU
        return f"{exc} The next answer runs on the CPU."
    if isinstance(exc, RemoteError):
        return remote_message(exc)
    if isinstance(exc, EngineError | ConstraintError):  # a JSON answer's schema, too
        return str(exc)
    if isinstance(exc, ValueError):  # SamplingSettings.validate
        return f"Invalid sampling settings: {exc}."
    return failed("Generation", exc)


def failure_stats(partial: object) -> RunStats | None:
    """The figures of an answer that failed midway (from JobError.partial), marked "error"."""
    if not isinstance(partial, RunStats):
        return None
    stats = copy.deepcopy(partial)
    stats.finish_reason = "error"
    return stats


def measure_context_job(host: EngineHost, request: ContextRequest) -> Job:
    """What the context policy would send now (no answer is generated); returns a
    ContextReport, or None before a model is loaded."""

    def run(control: JobControl) -> ContextReport | None:
        if host.engine is None or host.remote is not None:  # a server's tokens are not known
            return None
        host.engine.tokenizer.use_style(request.prompt_style)
        _, report = fit_messages(
            control.request_id,
            request.messages,
            counter_for(host.engine),
            host.engine.max_context,
            request.max_new_tokens,
        )
        return report

    # A template that rejects the messages: the answer will say so; the log keeps it.
    return Job("context measurement", run, lambda exc: failed("Counting tokens", exc))
