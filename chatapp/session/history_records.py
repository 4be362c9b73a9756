"""Conversations between the store and the window: opening the history, ChatMessage <->
StoredMessage, and the signature that tells whether the store holds a message as it is shown."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import cast

from chatapp.engine.figures import AnswerFigures
from chatapp.session.chat_settings import ChatSettings
from chatapp.session.conversation import AnswerVersion, ChatMessage, Conversation
from chatapp.store import (
    Alternative,
    ConversationInfo,
    HistoryStore,
    MessageDraft,
    SchemaTooNewError,
    StoredConversation,
    StoredMessage,
    StoreError,
    open_default_store,
)
from chatapp.store.models import Role

Signature = tuple[str, int, tuple[str, ...]]  # a message's text, shown version, all versions


def figures_for_store(figures: AnswerFigures | None, model: str | None) -> AnswerFigures | None:
    """The answer's figures with the model's name, as the history keeps them."""
    if figures is None:
        return None
    return replace(figures, model=figures.model or model)


def conversation_from_store(stored: StoredConversation) -> Conversation:
    info = stored.info
    settings = ChatSettings.from_store(info.model, info.system_prompt, info.settings)
    return Conversation([message_from_store(m) for m in stored.messages], stored.id, settings)


def message_from_store(m: StoredMessage) -> ChatMessage:
    others = tuple(AnswerVersion(a.content, a.figures, a.tool_calls) for a in m.alternatives)
    return ChatMessage(
        m.role,
        m.content,
        m.figures,
        m.id,
        others,
        m.version,
        m.tool_calls,
        m.tool_call_id,
        m.tool_name,
    )


def draft_of(m: ChatMessage, model: str | None) -> MessageDraft:
    """A message of the window as the history stores it."""
    return MessageDraft(
        cast(Role, m.role),
        m.content,
        figures_for_store(m.figures, model),
        alternatives=tuple(
            Alternative(o.content, figures_for_store(o.figures, model), None, o.tool_calls)
            for o in m.others
        ),
        version=m.version,
        tool_calls=m.tool_calls,
        tool_call_id=m.tool_call_id,
        tool_name=m.tool_name,
    )


def stored_signature(m: StoredMessage) -> Signature:
    others = [a.content for a in m.alternatives]
    return m.content, m.version, (*others[: m.version], m.content, *others[m.version :])


def memory_signature(m: ChatMessage) -> Signature:
    return m.content, m.version, tuple(v.content for v in m.versions())


def snapshot(
    conversation: Conversation, model: str | None, system_prompt: str, now: datetime
) -> StoredConversation:
    """The conversation as shown, in the store's shape, for an export of what the history
    could not save (every message gets `now` as its time when it has none)."""
    messages = tuple(
        StoredMessage(
            id=m.id or 0,
            conversation_id=conversation.id or 0,
            position=i,
            role=cast(Role, m.role),
            content=m.content,
            created=now,
            figures=figures_for_store(m.figures, model) if m.role == "assistant" else None,
            alternatives=tuple(
                Alternative(o.content, figures_for_store(o.figures, model), now, o.tool_calls)
                for o in m.others
            ),
            version=m.version,
            tool_calls=m.tool_calls,
            tool_call_id=m.tool_call_id,
            tool_name=m.tool_name,
        )
        for i, m in enumerate(conversation.messages)
    )
    info = ConversationInfo(
        conversation.id or 0, conversation.title, now, now, model, system_prompt, len(messages)
    )
    return StoredConversation(info, messages)


@dataclass(frozen=True)
class OpenedHistory:
    store: HistoryStore | None
    notice: str | None  # for the window: a recovered file, or why history is off
    level: str = "warning"  # stays up until dismissed (a loaded model clears errors)


def open_history(opener: Callable[[], HistoryStore] = open_default_store) -> OpenedHistory:
    """Open the default history; never raises (the app runs without history if it must)."""
    try:
        store = opener()
    except SchemaTooNewError as exc:
        return OpenedHistory(None, f"{exc} Chats are not saved in this session.")
    except StoreError as exc:
        return OpenedHistory(None, f"{exc} Chats are not saved in this session.")
    notice = store.recovery.message() if store.recovery is not None else None
    if store.read_only:  # shown read-only rather than hidden (issue 12)
        notice = store.read_only_message()
    return OpenedHistory(store, notice, "warning")


IMPORTED = " (imported)"


def imported_title(title: str) -> str:
    """An imported chat's title: the original's, marked once."""
    return title if title.endswith(IMPORTED) else f"{title}{IMPORTED}"
