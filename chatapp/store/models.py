"""Plain data the store hands out and takes in. Frozen: a loaded row is a snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from chatapp.engine.figures import FIGURES, AnswerFigures
from chatapp.engine.text.chat import ToolCall

Role = Literal["user", "assistant", "tool"]
# The system prompt lives on the conversation; "tool": a tool's result, answering a call.
ROLES: tuple[str, ...] = ("user", "assistant", "tool")

# The store keeps the engine's figures record as it is, one column per field.
Figures = AnswerFigures
FIGURE_TEXTS = tuple(f.name for f in FIGURES if f.kind is str)
FIGURE_FLOATS = tuple(f.name for f in FIGURES if f.kind is float)
FIGURE_INTS = tuple(f.name for f in FIGURES if f.kind is int)


@dataclass(frozen=True)
class Alternative:
    """Another version of an answer: one that Regenerate replaced, or one the user switched
    away from (store/alternatives.py)."""

    content: str
    figures: Figures | None = None
    created: datetime | None = None  # None in a draft: the time it is stored
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class MessageDraft:
    """A message not stored yet (for `replace_after` and imports)."""

    role: Role
    content: str
    figures: Figures | None = None
    created: datetime | None = None  # None: the time it is stored
    # An answer's other versions, in order; this one sits at `version` among them all.
    alternatives: tuple[Alternative, ...] = ()
    version: int = 0
    tool_calls: tuple[ToolCall, ...] = ()  # an answer's calls (its content may then be "")
    tool_call_id: str | None = None  # a tool message: the call it answers
    tool_name: str | None = None  # ... and that call's tool


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    position: int  # 0, 1, 2, ... within the conversation, without gaps
    role: Role
    content: str
    created: datetime  # timezone-aware, UTC
    figures: Figures | None = None  # assistant answers only; None when nothing is known
    # An answer's other versions in order (`created` set); all of them, in order, are
    # alternatives[:version] + [this message] + alternatives[version:].
    alternatives: tuple[Alternative, ...] = ()
    version: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    tool_name: str | None = None


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
    settings: str = "{}"  # the chat's own settings, JSON (session/chat_settings.py)


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
    settings: str = "{}"  # the chat's own settings, JSON (session/chat_settings.py)


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
