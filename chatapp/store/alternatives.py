"""The other versions of an answer: Regenerate keeps the answers it replaces.

An answer's row in `messages` holds the version shown: the one the model sees when the chat
goes on, the one search finds and exports show first. The table `alternatives` holds the
others, in order (`ordinal`), and `messages.version` says where the shown one sits among
them all: `others[:version] + [shown] + others[version:]`. Showing another version swaps
texts and figures between the two tables in one transaction; the message keeps its id, so
the rest of the history (and another window) is not disturbed.

These functions run inside a transaction that the store opened (`HistoryStore._write`/_read).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime

from chatapp.store.errors import MessageNotFoundError
from chatapp.store.models import Alternative, StoredMessage, from_iso, to_iso
from chatapp.store.rows import FIGURE_COLUMNS, figure_values, figures_or_none, stored_calls
from chatapp.store.tool_fields import calls_json

_FIGURES = ", ".join(FIGURE_COLUMNS)


def insert(
    conn: sqlite3.Connection,
    message_id: int,
    others: Sequence[Alternative],
    now: Callable[[], datetime],
) -> tuple[Alternative, ...]:
    """Store `others` as the other versions of `message_id` (which has none yet)."""
    stored: list[Alternative] = []
    for ordinal, other in enumerate(others):
        created = other.created or now()
        conn.execute(
            "INSERT INTO alternatives (message_id, ordinal, content, created, tool_calls, "
            f"{_FIGURES}) VALUES (?, ?, ?, ?, ?, {', '.join('?' for _ in FIGURE_COLUMNS)})",
            (
                message_id,
                ordinal,
                other.content,
                to_iso(created),
                calls_json(other.tool_calls),
                *figure_values(other.figures),
            ),
        )
        figures = None if other.figures is None or other.figures.is_empty() else other.figures
        stored.append(Alternative(other.content, figures, created, other.tool_calls))
    return tuple(stored)


def load(conn: sqlite3.Connection, conversation_id: int) -> dict[int, tuple[Alternative, ...]]:
    """Message id -> its other versions in order, for one conversation's answers."""
    rows = conn.execute(
        "SELECT a.message_id, a.content, a.created, a.tool_calls, "
        f"{', '.join('a.' + c for c in FIGURE_COLUMNS)} "
        "FROM alternatives a JOIN messages m ON m.id = a.message_id "
        "WHERE m.conversation_id = ? ORDER BY a.message_id, a.ordinal",
        (conversation_id,),
    ).fetchall()
    found: dict[int, list[Alternative]] = {}
    for row in rows:
        calls = stored_calls(row[3], int(row[0]))
        other = Alternative(str(row[1]), figures_or_none(row[4:]), from_iso(row[2]), calls)
        found.setdefault(int(row[0]), []).append(other)
    return {message_id: tuple(others) for message_id, others in found.items()}


def with_alternatives(
    messages: Sequence[StoredMessage], found: dict[int, tuple[Alternative, ...]]
) -> tuple[StoredMessage, ...]:
    return tuple(replace(m, alternatives=found[m.id]) if m.id in found else m for m in messages)


def select(conn: sqlite3.Connection, message_id: int, version: int) -> None:
    """Show version `version` of answer `message_id` (0-based among all its versions)."""
    row = conn.execute(
        f"SELECT content, created, version, tool_calls, {_FIGURES} FROM messages WHERE id = ?",
        (message_id,),
    ).fetchone()
    if row is None:
        raise MessageNotFoundError(message_id)
    calls = stored_calls(row[3], message_id)
    shown = Alternative(str(row[0]), figures_or_none(row[4:]), from_iso(row[1]), calls)
    others = list(_others(conn, message_id))
    if not 0 <= version <= len(others):
        raise ValueError(f"answer {message_id} has {len(others) + 1} versions, not {version + 1}")
    everything = [*others[: int(row[2])], shown, *others[int(row[2]) :]]
    chosen = everything.pop(version)
    created = chosen.created or from_iso(row[1])  # stored versions all have their time
    conn.execute(
        "UPDATE messages SET content = ?, created = ?, version = ?, tool_calls = ?, "
        f"{', '.join(c + ' = ?' for c in FIGURE_COLUMNS)} WHERE id = ?",
        (
            chosen.content,
            to_iso(created),
            version,
            calls_json(chosen.tool_calls),
            *figure_values(chosen.figures),
            message_id,
        ),
    )
    conn.execute("DELETE FROM alternatives WHERE message_id = ?", (message_id,))
    insert(conn, message_id, everything, lambda: created)


def _others(conn: sqlite3.Connection, message_id: int) -> tuple[Alternative, ...]:
    rows = conn.execute(
        f"SELECT content, created, tool_calls, {_FIGURES} FROM alternatives WHERE message_id = ? "
        "ORDER BY ordinal",
        (message_id,),
    ).fetchall()
    return tuple(
        Alternative(
            str(r[0]), figures_or_none(r[3:]), from_iso(r[1]), stored_calls(r[2], message_id)
        )
        for r in rows
    )
