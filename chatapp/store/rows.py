"""Rows <-> records for the history store, and the text helpers its search uses."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, cast

from chatapp.engine.text.chat import ToolCall
from chatapp.store.errors import ImportFormatError, StoreError
from chatapp.store.models import (
    FIGURE_FLOATS,
    FIGURE_INTS,
    FIGURE_TEXTS,
    ROLES,
    ConversationInfo,
    Figures,
    MessageDraft,
    Role,
    StoredMessage,
    from_iso,
)
from chatapp.store.tool_fields import calls_from_json

FIGURE_COLUMNS = FIGURE_TEXTS + FIGURE_FLOATS + FIGURE_INTS
# The tool columns before the figures: a row's figures are its tail.
MESSAGE_COLUMNS = (
    "id, conversation_id, position, role, content, created, version, tool_calls, tool_call_id, "
    "tool_name, " + ", ".join(FIGURE_COLUMNS)
)
CONVERSATION_COLUMNS = (
    "c.id, c.title, c.created, c.updated, c.model, c.system_prompt, "
    "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id), c.settings"
)


def fold(text: str | None) -> str | None:
    return None if text is None else text.casefold()


def snippet(text: str, needle: str, width: int = 80) -> str:
    """About `width` characters around the first match, on one line.

    The match is found in the casefolded text ("ß" matches "ss"). Only the text near the
    match is folded and flattened: a search hitting 4 Mi-character messages took 60 ms per
    hit when the whole message was.
    """
    found = max(_find_folded(text, needle), 0)
    lo, hi = max(0, found - 8 * width), min(len(text), found + len(needle) + 8 * width)
    flat = " ".join(text[lo:hi].split())
    at = max(_find_folded(flat, needle), 0)
    start = max(0, at - width // 3)
    end = min(len(flat), start + width)
    cut_before = start > 0 or (lo > 0 and not text[:lo].isspace())
    cut_after = end < len(flat) or (hi < len(text) and not text[hi:].isspace())
    return ("…" if cut_before else "") + flat[start:end] + ("…" if cut_after else "")


_CHUNK = 1 << 16


def _find_folded(text: str, needle: str) -> int:
    """Where casefolded `needle` first occurs in `text`, folding the text a chunk at a time
    only as far as the match."""
    for start in range(0, len(text), _CHUNK):
        # Folding never shortens text, so len(needle) characters of overlap are enough.
        piece = text[start : start + _CHUNK + len(needle)]
        folded = piece.casefold()
        found = folded.find(needle)
        if found >= 0:
            return start + (found if len(folded) == len(piece) else _unfolded(piece, found))
    return -1


def _unfolded(piece: str, folded_at: int) -> int:
    """The index in `piece` of the character whose folding holds `folded_at`."""
    total = 0
    for i, char in enumerate(piece):
        total += len(char.casefold())
        if total > folded_at:
            return i
    return len(piece)


def check_draft(draft: MessageDraft) -> None:
    if draft.role not in ROLES:
        raise ValueError(f"role must be 'user', 'assistant' or 'tool', not {draft.role!r}")
    if draft.role != "assistant" and (
        draft.tool_calls or any(a.tool_calls for a in draft.alternatives)
    ):
        raise ValueError("only assistant messages call tools")
    if (draft.role == "tool") != (draft.tool_call_id is not None):
        raise ValueError("a tool message, and only one, answers a call (tool_call_id)")
    if draft.figures is not None and draft.role != "assistant":
        raise ValueError("only assistant messages have figures")
    if draft.alternatives and draft.role != "assistant":
        raise ValueError("only assistant messages have other versions")
    if not 0 <= draft.version <= len(draft.alternatives):
        raise ValueError(
            f"version {draft.version} is not among the {len(draft.alternatives) + 1} versions"
        )


def figures_or_none(values: Sequence[Any]) -> Figures | None:
    """The figures of one row's figure columns (in FIGURE_COLUMNS order); None if empty."""
    figures = Figures(**dict(zip(FIGURE_COLUMNS, values, strict=True)))
    return None if figures.is_empty() else figures


def figure_values(figures: Figures | None) -> tuple[Any, ...]:
    """The figure columns' values for `figures` (all NULL for None or empty figures)."""
    if figures is None or figures.is_empty():
        return (None,) * len(FIGURE_COLUMNS)
    values = figures.to_dict()
    return tuple(values[c] for c in FIGURE_COLUMNS)


def lastrowid(cur: sqlite3.Cursor) -> int:
    if cur.lastrowid is None:  # cannot happen after an INSERT; keeps the type checker honest
        raise StoreError("the database did not return the new row's id")
    return int(cur.lastrowid)


def conversation_info(row: Sequence[Any]) -> ConversationInfo:
    return ConversationInfo(
        id=int(row[0]),
        title=str(row[1]),
        created=from_iso(row[2]),
        updated=from_iso(row[3]),
        model=row[4],
        system_prompt=str(row[5]),
        message_count=int(row[6]),
        settings=str(row[7]),
    )


def message_from_row(row: Sequence[Any]) -> StoredMessage:
    return StoredMessage(
        id=int(row[0]),
        conversation_id=int(row[1]),
        position=int(row[2]),
        role=cast(Role, row[3]),
        content=str(row[4]),
        created=from_iso(row[5]),
        version=int(row[6]),
        tool_calls=stored_calls(row[7], int(row[0])),
        tool_call_id=None if row[8] is None else str(row[8]),
        tool_name=None if row[9] is None else str(row[9]),
        figures=figures_or_none(row[10:]),
    )


def stored_calls(text: Any, message_id: int) -> tuple[ToolCall, ...]:
    """A row's calls; a column that another program spoiled is an error that names it."""
    try:
        return calls_from_json(None if text is None else str(text), "tool_calls")
    except ImportFormatError as exc:
        raise StoreError(
            f"The chat history's message {message_id} holds tool calls chatapp cannot read "
            f"({exc.problem})."
        ) from None
