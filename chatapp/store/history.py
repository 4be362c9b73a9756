"""Chat history in one SQLite file: conversations, their messages and each answer's figures.

Search: case-insensitive substring match (Unicode casefold, in Python) over titles and message
text. FTS5 is compiled into this Python's SQLite (3.40.1), and was considered, but not chosen:
- a database whose triggers reference an FTS5 table cannot be written at all by an SQLite built
  without FTS5 (another Python, a packaged build), and the schema would depend on the build;
- FTS5's default tokenizer finds words, not substrings ("bind" misses "IOBinding"); the
  trigram tokenizer finds substrings but not queries under 3 characters, and triples the size;
- a scan is fast enough for chat histories: 50 000 messages of ~1 000 characters (a 68 MB
  file) in about 0.25 s here, a typical history of a few MB in milliseconds. Run it off the
  keystroke (debounced). An FTS index later is one migration away.

Opening the file, transactions, and what two instances on one file do: history_file.py.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import cast

from chatapp.datadir import data_dir
from chatapp.store import alternatives, export, transcript
from chatapp.store.errors import ConversationNotFoundError, MessageNotFoundError
from chatapp.store.history_file import HistoryFile
from chatapp.store.models import (
    ConversationDraft,
    ConversationInfo,
    Figures,
    MessageDraft,
    Role,
    SearchHit,
    StoredConversation,
    StoredMessage,
    to_iso,
)
from chatapp.store.rows import (
    CONVERSATION_COLUMNS,
    FIGURE_COLUMNS,
    MESSAGE_COLUMNS,
    check_draft,
    conversation_info,
    figure_values,
    fold,
    lastrowid,
    message_from_row,
    snippet,
)
from chatapp.store.tool_fields import calls_json

DEFAULT_FILENAME = "history.sqlite3"
DEFAULT_TITLE = "New chat"


def default_history_path() -> Path:
    return data_dir() / DEFAULT_FILENAME


def open_default_store() -> HistoryStore:
    """The history in the user's data folder (`CHATAPP_DATA_DIR` overrides).

    Check `store.recovery` afterwards: if set, show `store.recovery.message()`.
    """
    return HistoryStore(default_history_path())


class HistoryStore(HistoryFile):
    """The chat history at `path`: conversations, their messages (with alternatives) and
    figures, search, export and import. Opening it: `HistoryFile`."""

    # --- conversations ---------------------------------------------------------------------

    def create_conversation(
        self, title: str = DEFAULT_TITLE, *, model: str | None = None, system_prompt: str = ""
    ) -> ConversationInfo:
        now = self._now()
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, created, updated, model, system_prompt) "
                "VALUES (?, ?, ?, ?, ?)",
                (title, to_iso(now), to_iso(now), model, system_prompt),
            )
            conv_id = lastrowid(cur)
        return ConversationInfo(conv_id, title, now, now, model, system_prompt, 0)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        self.update_conversation(conversation_id, title=title)

    def update_conversation(
        self,
        conversation_id: int,
        *,
        title: str | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
        settings: str | None = None,
    ) -> None:
        """Change what is given (None: keep). Does not move it up the list."""
        changes = {
            "title": title,
            "model": model,
            "system_prompt": system_prompt,
            "settings": settings,
        }
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return
        assignments = ", ".join(f"{name} = ?" for name in changes)
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE conversations SET {assignments} WHERE id = ?",
                (*changes.values(), conversation_id),
            )
            if cur.rowcount == 0:
                raise ConversationNotFoundError(conversation_id)

    def delete_conversation(self, conversation_id: int) -> bool:
        """Delete it and (foreign key cascade) its messages; False if it was already gone."""
        with self._write() as conn:
            cur = conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))
            return cur.rowcount > 0

    def list_conversations(self) -> list[ConversationInfo]:
        """Most recently active first."""
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {CONVERSATION_COLUMNS} FROM conversations c "
                "ORDER BY c.updated DESC, c.id DESC"
            ).fetchall()
        return [conversation_info(row) for row in rows]

    def get_conversation(self, conversation_id: int) -> ConversationInfo:
        with self._read() as conn:
            return self._info(conn, conversation_id)

    def load_conversation(self, conversation_id: int) -> StoredConversation:
        """The conversation with all its messages in order."""
        with self._read() as conn:
            info = self._info(conn, conversation_id)
            rows = conn.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE conversation_id = ? "
                "ORDER BY position",
                (conversation_id,),
            ).fetchall()
            others = alternatives.load(conn, conversation_id)
        messages = [message_from_row(row) for row in rows]
        return StoredConversation(info, alternatives.with_alternatives(messages, others))

    def _info(self, conn: sqlite3.Connection, conversation_id: int) -> ConversationInfo:
        row = conn.execute(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE c.id = ?",
            (conversation_id,),
        ).fetchone()
        if row is None:
            raise ConversationNotFoundError(conversation_id)
        return conversation_info(row)

    # --- messages --------------------------------------------------------------------------

    def append_message(
        self,
        conversation_id: int,
        role: Role,
        content: str,
        figures: Figures | None = None,
    ) -> StoredMessage:
        """Add a message at the end; committed (durable) when this returns."""
        (message,) = self.append_drafts(conversation_id, [MessageDraft(role, content, figures)])
        return message

    def append_drafts(
        self, conversation_id: int, drafts: Sequence[MessageDraft]
    ) -> list[StoredMessage]:
        """Add messages at the end in one transaction; committed when this returns."""
        with self._write() as conn:
            self._check_conversation(conn, conversation_id)
            stored = self._insert(conn, conversation_id, drafts)
            self._touch(conn, conversation_id)
        return stored

    def replace_after(
        self,
        message_id: int,
        messages: Sequence[MessageDraft] = (),
        *,
        new_content: str | None = None,
    ) -> list[StoredMessage]:
        """Edit-and-regenerate in one transaction: drop every message after `message_id`,
        optionally give that message `new_content`, then append `messages`.

        `replace_after(user_id, new_content=text)` edits a user message and cuts the rest;
        `replace_after(user_id, [answer])` swaps in a regenerated answer only once it exists,
        so the old answer survives if the app dies while the new one is being written.
        Returns the appended messages.
        """
        drafts = list(messages)
        with self._write() as conn:
            row = conn.execute(
                "SELECT conversation_id, position FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise MessageNotFoundError(message_id)
            conversation_id, position = int(row[0]), int(row[1])
            conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND position > ?",
                (conversation_id, position),
            )
            if new_content is not None:
                conn.execute(
                    "UPDATE messages SET content = ? WHERE id = ?", (new_content, message_id)
                )
            stored = self._insert(conn, conversation_id, drafts)
            self._touch(conn, conversation_id)
        return stored

    def select_alternative(self, message_id: int, version: int) -> None:
        """Show version `version` (0-based) of answer `message_id`: its text and figures become
        the message's, the one shown so far joins the others (store/alternatives.py)."""
        with self._write() as conn:
            alternatives.select(conn, message_id, version)

    def truncate_after(self, message_id: int) -> int:
        """Drop every message after `message_id`; returns how many went."""
        with self._write() as conn:
            row = conn.execute(
                "SELECT conversation_id, position FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise MessageNotFoundError(message_id)
            cur = conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND position > ?",
                (int(row[0]), int(row[1])),
            )
            self._touch(conn, int(row[0]))
            return cur.rowcount

    def _check_conversation(self, conn: sqlite3.Connection, conversation_id: int) -> None:
        row = conn.execute("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,))
        if row.fetchone() is None:
            raise ConversationNotFoundError(conversation_id)

    def _touch(self, conn: sqlite3.Connection, conversation_id: int) -> None:
        conn.execute(
            "UPDATE conversations SET updated = ? WHERE id = ?",
            (to_iso(self._now()), conversation_id),
        )

    def _insert(
        self, conn: sqlite3.Connection, conversation_id: int, drafts: Sequence[MessageDraft]
    ) -> list[StoredMessage]:
        """Append inside the caller's transaction (which also bumps `updated`)."""
        stored: list[StoredMessage] = []
        for draft in drafts:
            check_draft(draft)
            created = draft.created or self._now()
            figures = draft.figures if draft.figures and not draft.figures.is_empty() else None
            # Position computed under the write lock: two instances never pick the same one.
            cur = conn.execute(
                "INSERT INTO messages (conversation_id, position, role, content, created, "
                f"version, tool_calls, tool_call_id, tool_name, {', '.join(FIGURE_COLUMNS)}) "
                "SELECT ?, coalesce(max(position) + 1, 0), ?, ?, ?, ?, ?, ?, ?, "
                f"{', '.join('?' for _ in FIGURE_COLUMNS)} "
                "FROM messages WHERE conversation_id = ?",
                (
                    conversation_id,
                    draft.role,
                    draft.content,
                    to_iso(created),
                    draft.version,
                    calls_json(draft.tool_calls),
                    draft.tool_call_id,
                    draft.tool_name,
                    *figure_values(figures),
                    conversation_id,
                ),
            )
            message_id = lastrowid(cur)
            (position,) = conn.execute(
                "SELECT position FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            others = alternatives.insert(conn, message_id, draft.alternatives, self._now)
            stored.append(
                StoredMessage(
                    message_id,
                    conversation_id,
                    int(position),
                    draft.role,
                    draft.content,
                    created.astimezone(UTC),
                    figures,
                    others,
                    draft.version,
                    draft.tool_calls,
                    draft.tool_call_id,
                    draft.tool_name,
                )
            )
        return stored

    # --- search ----------------------------------------------------------------------------

    def search(self, query: str, *, limit: int = 200) -> list[SearchHit]:
        """Titles and messages containing `query` (case-insensitive), most recent
        conversations first, then in message order; at most `limit` hits."""
        needle = fold(query.strip())
        if not needle:
            return []
        with self._read() as conn:
            title_rows = conn.execute(
                "SELECT id, title FROM conversations WHERE instr(chatapp_fold(title), ?) > 0 "
                "ORDER BY updated DESC, id DESC LIMIT ?",
                (needle, limit),
            ).fetchall()
            message_rows = conn.execute(
                "SELECT c.id, c.title, m.id, m.position, m.role, m.content "
                "FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                "WHERE instr(chatapp_fold(m.content), ?) > 0 "
                "ORDER BY c.updated DESC, c.id DESC, m.position LIMIT ?",
                (needle, limit),
            ).fetchall()
        hits = [
            SearchHit(int(r[0]), str(r[1]), None, None, None, snippet(r[1], needle))
            for r in title_rows
        ]
        hits += [
            SearchHit(
                int(r[0]),
                str(r[1]),
                int(r[2]),
                int(r[3]),
                cast(Role, r[4]),
                snippet(str(r[5]), needle),
            )
            for r in message_rows
        ]
        return hits[:limit]

    # --- export / import -------------------------------------------------------------------

    def export_markdown(self, conversation_id: int) -> str:
        return transcript.to_markdown(self.load_conversation(conversation_id))

    def export_json(self, conversation_id: int) -> str:
        return export.to_json(self.load_conversation(conversation_id))

    def import_json(self, data: str | bytes) -> StoredConversation:
        """Add an exported conversation as a new one; nothing is written if it is invalid."""
        draft = export.parse_json(data, now=self._clock())
        return self.add_conversation(draft)

    def import_file(self, path: Path | str) -> StoredConversation:
        return self.import_json(export.read_export_file(path))

    def add_conversation(self, draft: ConversationDraft) -> StoredConversation:
        """Store a whole conversation in one transaction (all or nothing).

        `updated` becomes now, so an imported conversation shows at the top of the list.
        """
        for message in draft.messages:
            check_draft(message)
        now = self._now()
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO conversations (title, created, updated, model, system_prompt, "
                "settings) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    draft.title,
                    to_iso(draft.created),
                    to_iso(now),
                    draft.model,
                    draft.system_prompt,
                    draft.settings,
                ),
            )
            conv_id = lastrowid(cur)
            self._insert(conn, conv_id, draft.messages)
        return self.load_conversation(conv_id)
