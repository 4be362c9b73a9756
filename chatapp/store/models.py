"""Plain data the store hands out and takes in. Frozen: a loaded row is a snapshot."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, Literal

Role = Literal["user", "assistant"]
ROLES: tuple[str, ...] = ("user", "assistant")  # the system prompt lives on the conversation

FIGURE_FLOATS = (
    "tokens_per_s",
    "ttft_s",
    "perplexity",
    "prompt_perplexity",
    "h2d_bytes_per_token",
    "d2h_bytes_per_token",
)
FIGURE_INTS = ("prompt_tokens", "reused_tokens", "generated_tokens", "context_length")
FIGURE_TEXTS = ("model", "device", "mode", "finish_reason")


@dataclass(frozen=True)
class Figures:
    """What an answer cost and how sure the model was; each field may be unknown (None).

    Field names match `chatapp.session.conversation.AnswerFigures` (plus `model`), so
    `Figures.from_mapping({"model": name, **answer_figures.to_dict()})` just works.
    NaN and infinities become None: SQLite and JSON have no NaN.
    """

    model: str | None = None
    device: str | None = None
    mode: str | None = None  # the generation loop: "naive" | "iobinding"
    tokens_per_s: float | None = None
    ttft_s: float | None = None
    perplexity: float | None = None
    prompt_perplexity: float | None = None
    prompt_tokens: int | None = None
    reused_tokens: int | None = None
    generated_tokens: int | None = None
    context_length: int | None = None
    finish_reason: str | None = None  # eos | length | stop | error
    h2d_bytes_per_token: float | None = None  # host -> device per decode step (median)
    d2h_bytes_per_token: float | None = None  # device -> host

    def __post_init__(self) -> None:
        # Plain Python numbers: the engine's figures may be numpy scalars, which sqlite3 and
        # json cannot take.
        for name in FIGURE_FLOATS:
            value = getattr(self, name)
            if value is not None:
                value = float(value)
                object.__setattr__(self, name, value if math.isfinite(value) else None)
        for name in FIGURE_INTS:
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, int(value))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Figures:
        """Known keys only: a GUI dict may carry more than the store keeps."""
        return cls(**{name: data[name] for name in cls.names() if name in data})

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.names()}

    def is_empty(self) -> bool:
        return all(v is None for v in self.to_dict().values())


@dataclass(frozen=True)
class MessageDraft:
    """A message not stored yet (for `replace_after` and imports)."""

    role: Role
    content: str
    figures: Figures | None = None
    created: datetime | None = None  # None: the time it is stored


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    position: int  # 0, 1, 2, ... within the conversation, without gaps
    role: Role
    content: str
    created: datetime  # timezone-aware, UTC
    figures: Figures | None = None  # assistant answers only; None when nothing is known


@dataclass(frozen=True)
class ConversationInfo:
    """One row of the conversation list."""

    id: int
    title: str
    created: datetime
    updated: datetime  # the last change to its messages (renaming does not count)
    model: str | None
    system_prompt: str
    message_count: int = 0


@dataclass(frozen=True)
class StoredConversation:
    info: ConversationInfo
    messages: tuple[StoredMessage, ...] = field(default_factory=tuple)

    @property
    def id(self) -> int:
        return self.info.id

    @property
    def title(self) -> str:
        return self.info.title


@dataclass(frozen=True)
class SearchHit:
    conversation_id: int
    conversation_title: str
    message_id: int | None  # None: the title matched
    position: int | None
    role: Role | None
    snippet: str  # the text around the first match, one line


@dataclass(frozen=True)
class ConversationDraft:
    """A whole conversation not stored yet: what a JSON import yields."""

    title: str
    created: datetime
    updated: datetime
    model: str | None = None
    system_prompt: str = ""
    messages: tuple[MessageDraft, ...] = ()


def to_iso(when: datetime) -> str:
    """UTC, fixed width, microseconds: sorts correctly as text."""
    if when.tzinfo is None:
        raise ValueError("naive datetime: the store keeps timezone-aware times only")
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def from_iso(text: str) -> datetime:
    when = datetime.fromisoformat(text)
    if when.tzinfo is None:
        raise ValueError(f"time without a timezone: {text!r}")
    return when.astimezone(UTC)
