"""One chat as plain data: messages and the figures of each answer.

No Qt here on purpose: a history store (a later issue) can save and load a `Conversation`
without knowing about widgets, and the controller only talks to this object.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from chatapp.engine.chat import Message
from chatapp.engine.metrics import RunStats


@dataclass(frozen=True)
class AnswerFigures:
    """What stays visible under a finished answer."""

    mode: str
    device: str
    tokens_per_s: float
    ttft_s: float
    perplexity: float
    prompt_perplexity: float
    prompt_tokens: int
    reused_tokens: int
    generated_tokens: int
    context_length: int
    finish_reason: str
    model: str = ""  # the model's name; filled in by the history when it stores the answer
    h2d_bytes_per_token: float = 0.0  # host -> device per decode token (0: nothing crosses)
    d2h_bytes_per_token: float = 0.0

    @classmethod
    def from_stats(cls, stats: RunStats, finish_reason: str | None = None) -> AnswerFigures:
        return cls(
            mode=stats.mode,
            device=stats.device,
            tokens_per_s=stats.tokens_per_s,
            ttft_s=stats.ttft_s,
            perplexity=stats.perplexity,
            prompt_perplexity=stats.prompt_perplexity,
            prompt_tokens=stats.prompt_tokens,
            reused_tokens=stats.reused_tokens,
            generated_tokens=stats.generated_tokens,
            context_length=stats.context_length,
            finish_reason=finish_reason or stats.finish_reason,
            h2d_bytes_per_token=stats.h2d_bytes_per_token,
            d2h_bytes_per_token=stats.d2h_bytes_per_token,
        )

    @property
    def transfer_bytes_per_token(self) -> float:
        return self.h2d_bytes_per_token + self.d2h_bytes_per_token

    @property
    def tokens_in_context(self) -> int:
        return self.prompt_tokens + self.generated_tokens

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        # JSON has no NaN: a store would choke on it.
        for key in ("perplexity", "prompt_perplexity"):
            if not math.isfinite(data[key]):
                data[key] = None
        return data


@dataclass
class ChatMessage:
    role: str  # "user" | "assistant"
    content: str
    figures: AnswerFigures | None = None  # assistant messages only
    id: int | None = None  # the history store's message id, once stored


@dataclass
class Conversation:
    """The messages of one chat; the system prompt is applied at request time."""

    messages: list[ChatMessage] = field(default_factory=list)
    id: int | None = None  # the history store's conversation id, once stored

    @property
    def title(self) -> str:
        for m in self.messages:
            if m.role == "user":
                line = m.content.strip().splitlines()[0] if m.content.strip() else ""
                return line[:60]
        return "New chat"

    def add_user(self, text: str) -> ChatMessage:
        message = ChatMessage("user", text)
        self.messages.append(message)
        return message

    def add_answer(self, text: str, figures: AnswerFigures | None) -> ChatMessage:
        message = ChatMessage("assistant", text, figures)
        self.messages.append(message)
        return message

    def pop_pending_user(self) -> str | None:
        """Remove a trailing user message that never got an answer; returns its text."""
        if self.messages and self.messages[-1].role == "user":
            return self.messages.pop().content
        return None

    def can_regenerate(self) -> bool:
        """An answer to write again, or a last question without one (the app was closed or
        killed while it was being answered: the history keeps the question)."""
        return bool(self.messages) and (self.messages[-1].role == "user" or len(self.messages) >= 2)

    def drop_last_answer(self) -> None:
        if len(self.messages) >= 2 and self.messages[-1].role == "assistant":
            self.messages.pop()

    def engine_messages(self, system_prompt: str = "") -> list[Message]:
        """What the model sees: the system prompt (if any) and every message so far."""
        out = [Message("system", system_prompt.strip())] if system_prompt.strip() else []
        out += [Message(m.role, m.content) for m in self.messages]
        return out

    def clear(self) -> None:
        self.messages.clear()
        self.id = None
