"""`Backend`: what answers a chat, the local `Engine` or a server's `RemoteEngine`, behind one face.

The answering path (session/answer.py) drives either through this protocol and reads what a
backend can do from its `Capabilities`, never from its class.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from chatapp.engine.chat import STYLE_TEMPLATE

if TYPE_CHECKING:
    from chatapp.engine.chat import ChatTokenizer, Message
    from chatapp.engine.constraints import OutputFormat
    from chatapp.engine.metrics import RunStats
    from chatapp.engine.sampling import SamplingSettings
    from chatapp.engine.warm_up import WarmUpProgress


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do beyond answering a chat."""

    counts_tokens: bool  # its tokenizer is here: contexts are measured and trimmed, tools read
    constrains_output: bool  # JSON answers (grammar-constrained decoding)
    continues_answers: bool  # goes on with the last answer (Continue)
    chooses_loop: bool  # the caller picks the generation loop (a server's loop is its own)


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
    """The local Engine and the RemoteEngine both answer through this."""

    @property
    def capabilities(self) -> Capabilities: ...
    @property
    def max_context(self) -> int: ...
    @property
    def answerer(self) -> str: ...  # who answers, for a sentence: a model's or a server's name
    @property
    def chat_tokenizer(self) -> ChatTokenizer | None: ...  # None where counts_tokens is False
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
        style: str = STYLE_TEMPLATE,  # engine/chat.py PROMPT_STYLES (a server: its own)
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
