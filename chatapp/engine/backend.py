"""`Backend`: what answers a chat (a model run here, or a server's) behind one face.

The answering path (session/answer.py) drives either through this protocol and reads what a
backend can do from its `Capabilities`, never from its class. What a backend is and measures
is its `card()`: the side panel, the comparison and the server's model list render from it,
and say "not reported" with the card's reason where a figure is absent. Only chatapp/remote/
knows the server's classes (tests/test_architecture.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from chatapp.engine.errors import EngineError
from chatapp.engine.text.chat import STYLE_TEMPLATE

if TYPE_CHECKING:
    from chatapp.engine.metrics import RunStats
    from chatapp.engine.sampling import SamplingSettings
    from chatapp.engine.structured.constraints import OutputFormat
    from chatapp.engine.text.chat import ChatTokenizer, Message
    from chatapp.engine.warm_up import WarmUpProgress


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond answering a chat."""

    counts_tokens: bool  # its tokenizer is here: contexts are measured and trimmed, tools read
    constrains_output: bool  # JSON answers (grammar-constrained decoding)
    continues_answers: bool  # goes on with the last answer (Continue)
    chooses_loop: bool  # the caller picks the generation loop (a server's loop is its own)
    calls_tools: bool  # tools go into its prompt and its calls are read (needs its tokenizer)


class BackendError(EngineError):
    """The backend could not be used (or not any further); one sentence for the user.
    `too_long`: it refused a conversation longer than its context."""

    too_long: bool = False


@dataclass(frozen=True)
class Fact:
    """One thing a card tells about a backend: its value, or (None) why it is not known."""

    label: str
    value: str | None
    absent: str = ""  # why there is no value ("" where there is one)


@dataclass(frozen=True)
class Measure:
    """A figure of every answer (the side panel's key): how this backend measures it, or
    why it never reports it."""

    key: str  # ttft | tokens_per_second | perplexity | prompt_perplexity | transfer | context
    how: str = ""  # what the number means here ("" where the panel's own words hold)
    absent: str = ""  # why it is never reported ("" where it is)
    missing: str = ""  # why an answer may come without it (a server that sends no log-probs)

    @property
    def reported(self) -> bool:
        return not self.absent


@dataclass(frozen=True)
class BackendCard:
    """What a backend is and what it measures, copied (safe to read on any thread)."""

    name: str  # the model's (a server's model id)
    runs_on: str  # "this machine", or a server's origin
    server: str | None  # a server's origin (scheme://host:port); None for a model run here
    max_context: int  # the tokens a chat may hold; 0 where it does not say
    capabilities: Capabilities
    facts: tuple[Fact, ...] = ()  # device, loop, threads, KV bytes per token, ...
    measures: tuple[Measure, ...] = ()
    # The backend's own figures of each answer, besides the ones measured here (a chatapp
    # server's loop, device, transfers): RunStats.server_figures.
    own_figures: bool = False
    notice: str | None = None  # a word the user should read (a key sent unencrypted)

    def fact(self, label: str) -> Fact:
        found = next((f for f in self.facts if f.label == label), None)
        return found or Fact(label, None, "not described by this backend")

    def measure(self, key: str) -> Measure:
        found = next((m for m in self.measures if m.key == key), None)
        return found or Measure(key)

    @property
    def description(self) -> str:
        context = f", {self.max_context}-token context" if self.max_context else ""
        where = f" on {self.server}" if self.server else ""
        return f"{self.name}{where}{context}"

    def as_dict(self) -> dict[str, Any]:
        """The card as JSON (the server's /v1/models entry carries its own)."""
        return {
            "name": self.name,
            "runs_on": self.runs_on,
            "max_context": self.max_context or None,
            "facts": {f.label: f.value if f.value is not None else None for f in self.facts},
            "measures": {
                m.key: ({"reported": True} if m.reported else {"reported": False, "why": m.absent})
                for m in self.measures
            },
        }


class TokenEvent(Protocol):
    """One streamed piece of an answer: a token, or (`tail`) text held back until the end."""

    @property
    def index(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def token_id(self) -> int: ...  # -1 where not known (a server sends text)
    @property
    def logprob(self) -> float: ...
    @property
    def latency_s(self) -> float: ...
    @property
    def tail(self) -> bool: ...
    @property
    def top_logprobs(self) -> tuple[tuple[int, float], ...]: ...


class AnswerStream(Protocol):
    """One answer as it runs: iterate for its events; `stats` fills in as it goes."""

    @property
    def stats(self) -> RunStats: ...
    def __iter__(self) -> Iterator[TokenEvent]: ...


class Backend(Protocol):
    """A model run here (engine.Engine) and a server (chatapp.remote) answer through this."""

    @property
    def capabilities(self) -> Capabilities: ...
    @property
    def max_context(self) -> int: ...
    @property
    def answerer(self) -> str: ...  # who answers, for a sentence: a model's or a server's name
    @property
    def chat_tokenizer(self) -> ChatTokenizer | None: ...  # None where counts_tokens is False
    def count_tokens(self, messages: Sequence[Message], style: str = STYLE_TEMPLATE) -> int:
        """The prompt's tokens; ValueError where counts_tokens is False."""
        ...

    def card(self) -> BackendCard: ...
    def close(self) -> None: ...  # what it holds open (a connection); a model here: nothing
    def needs_warm_up(self, mode: str | None = None) -> bool: ...
    def warm_up(self, mode: str | None = None) -> Iterator[WarmUpProgress]: ...
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
        style: str = STYLE_TEMPLATE,  # engine/text/chat.py PROMPT_STYLES (a server: its own)
    ) -> AnswerStream: ...
    def generate_ids(
        self,
        prompt_ids: Sequence[int],
        settings: SamplingSettings,
        mode: str | None = None,
        should_stop: Callable[[], bool] | None = None,
        ignore_eos: bool = False,
        top_logprobs: int = 0,
        output_format: OutputFormat | None = None,
    ) -> AnswerStream: ...
