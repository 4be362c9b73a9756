"""One chat as plain data: messages and the figures of each answer.

No Qt here on purpose: the history (chatapp/gui/history) saves and loads a `Conversation`
without knowing about widgets, and the chat controller only talks to this object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from chatapp.engine.figures import AnswerFigures
from chatapp.engine.structured.tool_calls import with_calls
from chatapp.engine.text.chat import Message, ToolCall
from chatapp.session.continued import continued_figures

if TYPE_CHECKING:
    from chatapp.session.chat_settings import ChatSettings


@dataclass(frozen=True)
class AnswerVersion:
    """One version of an answer (Regenerate keeps the earlier ones)."""

    content: str
    figures: AnswerFigures | None = None
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass
class ChatMessage:
    role: str  # "user" | "assistant" | "tool" (a tool's result, which the user typed)
    content: str  # the version shown: what the model sees when the chat goes on
    figures: AnswerFigures | None = None  # assistant messages only
    id: int | None = None  # the history store's message id, once stored
    # An answer's other versions in order; this one sits at `version` among them all:
    # others[:version] + [this] + others[version:] (the history keeps them the same way).
    others: tuple[AnswerVersion, ...] = ()
    version: int = 0
    tool_calls: tuple[ToolCall, ...] = ()  # an answer's calls, structured (content: its text)
    tool_call_id: str | None = None  # a tool message: the call it answers
    tool_name: str | None = None  # ... and that call's tool

    @property
    def shown(self) -> str:
        """The text the transcript shows: an answer's calls after its text, as blocks."""
        return with_calls(self.content, self.tool_calls)

    def engine_message(self) -> Message:
        return Message(self.role, self.content, self.tool_calls, self.tool_call_id)

    @property
    def version_count(self) -> int:
        return len(self.others) + 1

    def versions(self) -> list[AnswerVersion]:
        shown = AnswerVersion(self.content, self.figures, self.tool_calls)
        return [*self.others[: self.version], shown, *self.others[self.version :]]

    def select(self, version: int) -> bool:
        """Show version `version` (0-based); False if there is no such version."""
        if not 0 <= version < self.version_count or version == self.version:
            return False
        everything = self.versions()
        chosen = everything.pop(version)
        self.content, self.figures, self.tool_calls = (
            chosen.content,
            chosen.figures,
            chosen.tool_calls,
        )
        self.others, self.version = tuple(everything), version
        return True


@dataclass
class Conversation:
    """The messages of one chat; the system prompt is applied at request time."""

    messages: list[ChatMessage] = field(default_factory=list)
    id: int | None = None  # the history store's conversation id, once stored
    # How it was last answered (model, sampling, prompt...), when the history knows it.
    settings: ChatSettings | None = None

    @property
    def title(self) -> str:
        for m in self.messages:
            if m.role == "user":
                line = m.content.strip().splitlines()[0] if m.content.strip() else ""
                return line[:60]
        return "New chat"

    @property
    def model(self) -> str | None:
        """The model that wrote the latest answer (None before any, or when unknown)."""
        for m in reversed(self.messages):
            if m.role == "assistant" and m.figures is not None and m.figures.model:
                return m.figures.model
        return None

    def add_user(self, text: str) -> ChatMessage:
        message = ChatMessage("user", text)
        self.messages.append(message)
        return message

    def add_answer(
        self,
        text: str,
        figures: AnswerFigures | None,
        replaces: ChatMessage | None = None,
        tool_calls: tuple[ToolCall, ...] = (),
    ) -> ChatMessage:
        """The new answer; a regenerated one (`replaces` the answer before) keeps that
        answer's versions as its others and is shown as the last version."""
        message = ChatMessage("assistant", text, figures, tool_calls=tool_calls)
        if replaces is not None and replaces.role == "assistant":
            message.others = tuple(replaces.versions())
            message.version = len(message.others)
        self.messages.append(message)
        return message

    def add_continued(
        self,
        answer: ChatMessage,
        text: str,
        figures: AnswerFigures | None,
        calls: tuple[ToolCall, ...] = (),
    ) -> ChatMessage:
        """`answer` (taken off the end for Continue) back in place with `text` after it: one
        answer, its figures the whole answer's (session/continued.py)."""
        figures = continued_figures(answer.figures, figures)
        # A new row for the history (its id None): the stored one is replaced, figures too.
        message = ChatMessage(
            "assistant", answer.content + text, figures, None, answer.others, answer.version
        )
        message.tool_calls = (*answer.tool_calls, *calls)
        self.messages.append(message)
        return message

    def pending_call(self) -> ToolCall | None:
        return pending_call(self.messages)

    def add_tool_result(self, call: ToolCall, text: str) -> ChatMessage:
        """The tool's result for `call`, as the user typed it."""
        message = ChatMessage("tool", text, tool_call_id=call.id, tool_name=call.name)
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
        out += [m.engine_message() for m in self.messages]
        return out

    def clear(self) -> None:
        self.messages.clear()
        self.id = None
        self.settings = None


def pending_call(messages: Sequence[ChatMessage]) -> ToolCall | None:
    """The first call of the last answer that no tool result answers yet: what a reply as
    the tool answers next (None: the chat does not wait for a tool)."""
    answered: set[str] = set()
    for m in reversed(messages):
        if m.role == "tool" and m.tool_call_id is not None:
            answered.add(m.tool_call_id)
            continue
        if m.role == "assistant":
            return next((c for c in m.tool_calls if c.id not in answered), None)
        return None
    return None
