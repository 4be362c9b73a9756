"""A continued answer's own figures (schema version 9): a version 8 history upgrades in place
with its answers as they were, and the continuation's share, time and writer are stored,
exported and imported again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from chatapp.engine.figures import FIGURES
from chatapp.store import Figures, HistoryStore
from chatapp.store.schema import CURRENT_VERSION, MIGRATIONS, TOOL_MESSAGES_SINCE, migrate
from chatapp.store.transcript import figures_line
from tests.store.conftest import FULL_FIGURES, raw

CONTINUED = ("continued_tokens", "continued_ttft_s", "continued_by")


def _v8_file(path: Path) -> None:
    """A history of version 8 (the version before), with one answer and one other version."""
    conn = sqlite3.connect(path, isolation_level=None)
    migrate(conn, path, {v: MIGRATIONS[v] for v in range(1, TOOL_MESSAGES_SINCE + 1)})
    t = "2026-11-03T12:00:00.000000+00:00"
    conn.execute(
        "INSERT INTO conversations (title, created, updated) VALUES ('Ducks', ?, ?)", (t, t)
    )
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created) "
        "VALUES (1, 0, 'user', 'Do ducks sleep?', ?)",
        (t,),
    )
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created, model, "
        "tokens_per_s, ttft_s, generated_tokens, finish_reason, version) "
        "VALUES (1, 1, 'assistant', 'Yes.', ?, 'SmolLM2', 12.5, 0.2, 9, 'eos', 1)",
        (t,),
    )
    conn.execute(
        "INSERT INTO alternatives (message_id, ordinal, content, created, generated_tokens) "
        "VALUES (2, 0, 'They do.', ?, 3)",
        (t,),
    )
    conn.close()


def test_a_version_8_history_upgrades_with_its_answers_as_they_were(db_path: Path) -> None:
    _v8_file(db_path)
    conn = raw(db_path)
    assert conn.execute("PRAGMA user_version").fetchone() == (TOOL_MESSAGES_SINCE,)
    conn.close()
    with HistoryStore(db_path) as s:
        assert s.diagnostics()["schema_version"] == CURRENT_VERSION == 9
        (info,) = s.list_conversations()
        answer = s.load_conversation(info.id).messages[1]
        assert answer.content == "Yes." and answer.figures is not None
        assert (answer.figures.model, answer.figures.tokens_per_s) == ("SmolLM2", 12.5)
        assert answer.figures.generated_tokens == 9 and answer.figures.ttft_s == 0.2
        assert all(getattr(answer.figures, name) is None for name in CONTINUED)
        assert "continued" not in figures_line(answer.figures)
        assert answer.alternatives[0].figures is not None
        assert answer.alternatives[0].figures.generated_tokens == 3
    conn = raw(db_path)
    for table in ("messages", "alternatives"):
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        assert set(CONTINUED) <= columns, table
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_a_continued_answer_s_figures_are_stored_exported_and_imported(
    store: HistoryStore,
) -> None:
    assert {f.name for f in FIGURES if f.since == 9} == set(CONTINUED)
    figures = Figures(
        **{
            **FULL_FIGURES.to_dict(),
            "continued_tokens": 20,
            "continued_ttft_s": 0.085,
            "continued_by": "Gemma · Naive · CPU",
        }
    )
    conv = store.create_conversation("Ducks")
    store.append_message(conv.id, "user", "Do ducks sleep?")
    store.append_message(conv.id, "assistant", "Yes, with one eye open.", figures)
    assert store.load_conversation(conv.id).messages[1].figures == figures
    imported = store.import_json(store.export_json(conv.id))
    assert imported.messages[1].figures == figures
    markdown = store.export_markdown(conv.id)
    assert "continued by Gemma · Naive · CPU: +20 tokens, TTFT 85 ms" in markdown
