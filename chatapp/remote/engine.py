"""`RemoteEngine`: a remote server driven like `Engine`, with figures measured on this side.

`chat(messages, settings, mode, should_stop)` returns a `RemoteGeneration`; iterating it
yields one `RemoteEvent` per token (as `Generation` yields `StepEvent`s) and fills `stats`, a
`RemoteStats` (a RunStats with mode "remote" and device "remote"). What a client can measure:
time to first token (network included), tokens/s and per-token latency as received, and
perplexity when the server returns log-probs. What it cannot: the loop, the device, the
host <-> device bytes; a chatapp server reports its own in `server_figures`.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from chatapp.engine.backend import BackendCard
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import STYLE_TEMPLATE, Message
from chatapp.remote.card import SERVER_CAPABILITIES, server_card
from chatapp.remote.client import RemoteClient, ServedModel, Timeouts, count
from chatapp.remote.errors import RemoteError, RemoteHTTPError, RemoteStreamError
from chatapp.remote.reader import StreamReader

if TYPE_CHECKING:
    from chatapp.engine.structured.constraints import OutputFormat
    from chatapp.engine.warm_up import WarmUpProgress

perf = time.perf_counter
REMOTE = "remote"
READER = "chatapp-remote-reader"  # the thread that reads an answer's stream
# The server's finish_reason in the engine's words: "stop" means the model ended its answer
# (end of text or a stop string), as "eos" does locally; "stop" here is the user's Stop.
FINISH = {"stop": "eos", "length": "length", "content_filter": "eos", "tool_calls": "eos"}
# What only the server can measure (RemoteStats.to_dict()["unavailable"]).
UNAVAILABLE = ("loop", "device", "transfer", "prompt_perplexity", "run/host split")
# The AnswerFigures fields a client cannot measure (RunStats.unmeasured).
UNMEASURED = frozenset(
    {"h2d_bytes_per_token", "d2h_bytes_per_token", "prompt_perplexity", "reused_tokens"}
)
# One answer's text: 64 characters per token asked for (real tokens average about 4; the
# longest vocabulary entries are ~64), at most the message box's own limit. What the window
# can draw and save without freezing: 4 Mi characters kept its event loop busy for 200 ms.
MAX_CHARS_PER_TOKEN = 64
MAX_ANSWER_CHARS = 1024 * 1024
# Chunks without a token (role, usage, empty deltas): a few per answer from real servers.
MAX_IDLE_CHUNKS = 10_000
MAX_FIGURE = 2**53  # a chatapp server's figures: larger numbers are not figures


@dataclass
class RemoteStats(RunStats):
    """RunStats as seen from the client. `token_ids` stays empty: servers send text; the
    figures only the server could measure are `unmeasured`, the prompt's size until the
    server sends usage."""

    server: str = ""
    received_tokens: int = 0  # counted from the stream (log-prob entries, else chunks)
    usage_tokens: int | None = None  # the server's own count, when it sends usage
    remote_finish_reason: str = ""  # as the server said it
    unmeasured: frozenset[str] = UNMEASURED | {"prompt_tokens"}

    @property
    def generated_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.received_tokens

    @property
    def has_logprobs(self) -> bool:
        return bool(self.logprobs)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data.update(
            server=self.server,
            model=self.model,
            remote_finish_reason=self.remote_finish_reason,
            server_figures=self.server_figures or {},
            unavailable=list(UNAVAILABLE),
        )
        return data


@dataclass(frozen=True)
class RemoteEvent:
    """One token as received (the fields the GUI reads from a StepEvent)."""

    index: int
    text: str  # the chunk's text comes with its first token; the rest carry ""
    logprob: float  # nan when the server sent none
    latency_s: float  # arrival gap; a chunk's tokens share theirs
    token: str = ""  # the server's token text, when it sent log-probs
    token_id: int = -1  # servers send text, not ids
    tail: bool = False  # text with no token: the end of a character held back
    top_logprobs: tuple[tuple[int, float], ...] = ()  # never: servers' alternatives are text


class RemoteEngine:
    mode = REMOTE

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        model: str | None = None,
        timeouts: Timeouts | None = None,
        listing_timeouts: Timeouts | None = None,
    ) -> None:
        """Connects once to list the models (with `listing_timeouts` if given: a connect
        should not wait as long as an answer may); raises a RemoteError saying why it cannot."""
        self.client = RemoteClient(url, api_key, timeouts)
        try:
            self.models: list[ServedModel] = self.client.models(listing_timeouts)
        except BaseException:
            self.client.close()
            raise
        if not self.models:
            self.client.close()
            raise RemoteStreamError(f"{self.client.origin} serves no model.")
        chosen = next((m for m in self.models if m.id == model), None)
        if model and chosen is None:
            self.client.close()
            names = ", ".join(m.id for m in self.models[:5])
            raise RemoteError(f"{self.client.origin} does not serve '{model}' (it has {names}).")
        self.model = chosen or self.models[0]
        self.notice = key_notice(self.client.base, api_key)
        self._send_logprobs = True

    @property
    def server(self) -> str:
        return self.client.origin

    @property
    def max_context(self) -> int:
        return self.model.context_length

    @property
    def is_chatapp(self) -> bool:
        return self.model.owned_by == "chatapp"

    def close(self) -> None:
        self.client.close()

    # ---- the Backend protocol (engine/backend.py) ----------------------------------------
    capabilities = SERVER_CAPABILITIES
    chat_tokenizer = None  # the server's tokenizer is the server's

    @property
    def answerer(self) -> str:
        return self.server

    def count_tokens(self, messages: Sequence[Message], style: str = STYLE_TEMPLATE) -> int:
        raise ValueError(f"{self.server} counts its own tokens")

    def card(self) -> BackendCard:
        return server_card(
            self.model.id,
            self.server,
            self.max_context,
            self.is_chatapp,
            self.notice,
            dict(self.model.facts),
        )

    def needs_warm_up(self, mode: str | None = None) -> bool:
        return False  # a server warms up its own device

    def warm_up(self, mode: str | None = None) -> Iterator[WarmUpProgress]:
        return iter(())

    def chat(
        self,
        messages: Sequence[Message],
        settings: SamplingSettings,
        mode: str | None = None,
        should_stop: Callable[[], bool] | None = None,
        top_logprobs: int = 0,
        output_format: OutputFormat | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        continue_last: bool = False,
        style: str = STYLE_TEMPLATE,
    ) -> RemoteGeneration:
        """`mode` (naive / iobinding) is sent only to a chatapp server; others have no loop;
        `style` is not sent: a server renders a chat with its own template.
        What `capabilities` says a server cannot do is an EngineError."""
        if output_format is not None or tools or continue_last or top_logprobs:
            raise EngineError("A server answers a chat here, without JSON, tools or Continue.")
        settings.validate()
        return RemoteGeneration(self, list(messages), settings, mode, should_stop)

    def generate_ids(
        self,
        prompt_ids: Sequence[int],
        settings: SamplingSettings,
        mode: str | None = None,
        should_stop: Callable[[], bool] | None = None,
        ignore_eos: bool = False,
        top_logprobs: int = 0,
        output_format: OutputFormat | None = None,
    ) -> RemoteGeneration:
        raise EngineError("A server answers chats, not token ids.")

    def request_body(
        self, messages: Sequence[Message], settings: SamplingSettings, mode: str | None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model.id,
            "messages": [m.as_dict(api=True) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": settings.max_new_tokens,
            "temperature": settings.temperature,
            "top_p": settings.top_p,
        }
        if self._send_logprobs:
            body["logprobs"] = True
        if settings.seed is not None:
            body["seed"] = settings.seed
        if settings.top_k and not settings.greedy:
            body["top_k"] = settings.top_k  # vLLM, llama.cpp and chatapp read it
        if settings.repetition_penalty != 1.0:
            body["repetition_penalty"] = settings.repetition_penalty  # vLLM, chatapp
            body["repeat_penalty"] = settings.repetition_penalty  # llama.cpp
            # llama.cpp's own default is the last 64 tokens: ask for what is penalized here
            body["repeat_last_n"] = settings.penalty_last_n  # llama.cpp, chatapp
        if mode and self.is_chatapp:
            body["chatapp"] = {"loop": mode}
        return body


class RemoteGeneration:
    """Iterate to stream the answer; `text` and `stats` keep whatever arrived, errors too."""

    def __init__(
        self,
        engine: RemoteEngine,
        messages: list[Message],
        settings: SamplingSettings,
        mode: str | None,
        should_stop: Callable[[], bool] | None,
    ) -> None:
        self.engine = engine
        self.messages = messages
        self.settings = settings
        self.mode = mode
        self.should_stop = should_stop or (lambda: False)
        self.stats = RemoteStats(
            mode=REMOTE,
            device=REMOTE,
            context_length=engine.max_context,
            server=engine.server,
            model=engine.model.id,
        )
        self.text = ""
        self.error: RemoteError | None = None

    def __iter__(self) -> Iterator[RemoteEvent]:
        try:
            yield from self._stream()
        except RemoteHTTPError as exc:
            if not (self._retry_without_logprobs(exc)):
                self._fail(exc)
                raise
            yield from self._guarded_stream()
        except RemoteError as exc:
            self._fail(exc)
            raise

    def run(self) -> RemoteStats:
        for _ in self:
            pass
        return self.stats

    def _guarded_stream(self) -> Iterator[RemoteEvent]:
        try:
            yield from self._stream()
        except RemoteError as exc:
            self._fail(exc)
            raise

    def _retry_without_logprobs(self, exc: RemoteHTTPError) -> bool:
        """A server that refuses log-probs is asked again without (once; then remembered)."""
        engine = self.engine
        if (
            exc.status == 400
            and "logprob" in str(exc).lower()
            and engine._send_logprobs
            and self.stats.received_tokens == 0
        ):
            engine._send_logprobs = False
            return True
        return False

    def _fail(self, exc: RemoteError) -> None:
        self.error = exc
        self.stats.finish_reason = "error"
        if self.stats.received_tokens:
            exc.args = (f"{exc} The {self.stats.received_tokens} tokens received are kept.",)

    def _stream(self) -> Iterator[RemoteEvent]:
        stats = self.stats
        body = self.engine.request_body(self.messages, self.settings, self.mode)
        started = perf()
        previous = started
        # Read on a thread of its own: Stop works while a silent server keeps a read waiting.
        abandoned = threading.Event()
        items = self.engine.client.stream_chat(body, abandoned.is_set)
        chunks = StreamReader(items, self.should_stop, READER, abandoned)
        limit = self.settings.max_new_tokens
        max_chars = min(MAX_ANSWER_CHARS, MAX_CHARS_PER_TOKEN * limit + 4096)
        answered = False
        idle = 0  # chunks since the last token
        try:
            for chunk in chunks:
                idle += 1
                if idle > MAX_IDLE_CHUNKS:
                    raise RemoteStreamError(
                        f"{self.engine.server} sent {MAX_IDLE_CHUNKS} chunks in a row without "
                        "a token; the stream was closed."
                    )
                self._read_extras(chunk)
                choice = _first_choice(chunk, self.engine.server)
                if choice is None:
                    continue
                answered = True
                text, entries = _delta(choice, self.engine.server)
                if (entries or (text and not stats.logprobs)) and stats.received_tokens >= limit:
                    # More tokens than max_tokens: a server that ignores it is not read
                    # further (closing the stream tells it to stop).
                    stats.finish_reason = "length"
                    stats.remote_finish_reason = stats.remote_finish_reason or "length"
                    return
                entries = entries[: limit - stats.received_tokens]
                if len(self.text) + len(text) > max_chars:
                    raise RemoteStreamError(
                        f"{self.engine.server} sent more than {max_chars} characters for an "
                        f"answer of at most {limit} tokens; the rest was not read."
                    )
                if text and not entries and stats.logprobs:
                    # Text with no token from a server that sends log-probs: the end of a
                    # character held back (as Generation yields it at the end).
                    self.text += text
                    yield RemoteEvent(stats.received_tokens, text, math.nan, 0.0, tail=True)
                elif text or entries:
                    now = perf()
                    yield from self._tokens(text, entries, now - previous)
                    previous, idle = now, 0
                reason = choice.get("finish_reason")
                if isinstance(reason, str) and reason:
                    stats.remote_finish_reason = reason
                    stats.finish_reason = FINISH.get(reason, "eos")
                if self.should_stop():
                    stats.finish_reason = "stop"
                    return  # closing the stream tells the server to stop
        finally:
            chunks.close()
        if chunks.stopped:  # stopped while the server sent nothing
            stats.finish_reason = "stop"
            return
        if not answered:
            raise RemoteStreamError(
                f"{self.engine.server} sent no answer: none of its chunks had "
                "choices[0] with a delta; is this an OpenAI-compatible chat server?"
            )
        if not stats.finish_reason:
            stats.finish_reason = "eos"

    def _tokens(
        self, text: str, entries: list[dict[str, Any]], gap_s: float
    ) -> Iterator[RemoteEvent]:
        stats = self.stats
        count = max(len(entries), 1)
        first_chunk = stats.received_tokens == 0
        self.text += text
        for i in range(count):
            entry = entries[i] if entries else {}
            logprob = _finite(entry.get("logprob"))
            if first_chunk and i == 0:
                latency = stats.ttft_s = gap_s
            else:
                # Tokens that arrive together share the gap (only the first chunk's extra
                # tokens arrive with no gap of their own).
                latency = 0.0 if first_chunk else gap_s / count
                stats.latencies_s.append(latency)
            if math.isfinite(logprob):
                stats.logprobs.append(logprob)
            token = entry.get("token")
            yield RemoteEvent(
                stats.received_tokens,
                text if i == 0 else "",
                logprob,
                latency,
                token[:1000] if isinstance(token, str) else "",
            )
            stats.received_tokens += 1

    def _read_extras(self, chunk: dict[str, Any]) -> None:
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt = count(usage.get("prompt_tokens"))
            completion = count(usage.get("completion_tokens"))
            if prompt is not None:
                self.stats.prompt_tokens = prompt
                self.stats.unmeasured = UNMEASURED  # the prompt's size is the server's word
            if completion is not None:
                self.stats.usage_tokens = completion
        figures = chunk.get("chatapp")
        if isinstance(figures, dict):
            self.stats.server_figures = _plain_figures(figures)


def _first_choice(chunk: dict[str, Any], origin: str) -> dict[str, Any] | None:
    """choices[0] of a chunk; None for a chunk without choices (usage, figures)."""
    choices = chunk.get("choices")
    if choices is None or choices == []:
        return None
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise RemoteStreamError(
            f"{origin} sent a malformed stream: choices is not a list of objects."
        )
    return next((c for c in choices if c.get("index", 0) == 0), None)


def _finite(value: Any) -> float:
    """A log-prob as a float; nan for anything else (a 400-digit integer would overflow)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    try:
        return float(value)
    except OverflowError:
        return math.nan


def _plain_figures(figures: dict[str, Any]) -> dict[str, Any]:
    """A chatapp server's figures, keeping the values a figure can have: short text, finite
    numbers of a sane size, true/false and null."""
    kept: dict[str, Any] = {}
    for key, value in list(figures.items())[:100]:
        if not isinstance(key, str) or len(key) > 100:
            continue
        if value is None or isinstance(value, bool):
            kept[key] = value
        elif isinstance(value, str):
            kept[key] = value[:200]
        elif (
            isinstance(value, int | float)
            and math.isfinite(_finite(value))
            and abs(value) <= MAX_FIGURE
        ):
            kept[key] = value
    return kept


def _delta(choice: dict[str, Any], origin: str) -> tuple[str, list[dict[str, Any]]]:
    delta = choice.get("delta")
    if delta is None:
        delta = {}
    if not isinstance(delta, dict):
        raise RemoteStreamError(f"{origin} sent a malformed stream: a delta is not an object.")
    text = delta.get("content")
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise RemoteStreamError(f"{origin} sent a malformed stream: content is not text.")
    logprobs = choice.get("logprobs")
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list):
        entries = []
    return text, [e for e in entries if isinstance(e, dict)]


def key_notice(base: str, api_key: str | None) -> str | None:
    """A key sent in the clear beyond this machine deserves a word (`base`: from api_base)."""
    parts = urlsplit(base)
    if not api_key or parts.scheme == "https":
        return None
    host = parts.hostname or ""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if local:
        return None
    return (
        f"The API key travels unencrypted to {host} (http://); "
        "use https:// across a network you do not trust."
    )
