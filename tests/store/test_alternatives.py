"""Regenerated answers: an answer's other versions in their own table, switching between
them, their trip through migrations, deletes, and JSON / Markdown exports."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from chatapp.engine.figures import FIGURES
from chatapp.store import (
    Alternative,
    ConversationDraft,
    Figures,
    HistoryStore,
    ImportFormatError,
    ImportTooLargeError,
    MessageDraft,
    MessageNotFoundError,
)
from chatapp.store import export as export_module
from chatapp.store.export import parse_json, to_json
from chatapp.store.schema import MIGRATIONS, migrate
from chatapp.store.transcript import to_markdown
from tests.store.conftest import FULL_FIGURES, count_rows, raw

NOW = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)
FIRST = Alternative("first answer", Figures(mode="naive", tokens_per_s=10.0))
SECOND = Alternative("second answer", Figures(mode="iobinding", tokens_per_s=20.0))


def versions(message) -> list[str]:
    others = [a.content for a in message.alternatives]
    return [*others[: message.version], message.content, *others[message.version :]]


def regenerated(store: HistoryStore) -> int:
    """A conversation whose answer was regenerated twice; the third answer is shown."""
    draft = ConversationDraft(
        "ducks",
        NOW,
        NOW,
        messages=(
            MessageDraft("user", "why do ducks quack?"),
            MessageDraft("assistant", "third answer", FULL_FIGURES, None, (FIRST, SECOND), 2),
        ),
    )
    return store.add_conversation(draft).id


def test_an_answer_keeps_its_other_versions(store: HistoryStore, db_path: Path) -> None:
    conversation = store.load_conversation(regenerated(store))
    answer = conversation.messages[1]
    assert versions(answer) == ["first answer", "second answer", "third answer"]
    assert answer.version == 2 and answer.figures == FULL_FIGURES
    assert [a.figures for a in answer.alternatives] == [FIRST.figures, SECOND.figures]
    assert all(a.created is not None for a in answer.alternatives)
    assert conversation.messages[0].alternatives == ()
    assert count_rows(db_path, "alternatives") == 2


def test_selecting_a_version_swaps_text_and_figures_and_keeps_the_id(
    store: HistoryStore,
) -> None:
    conversation_id = regenerated(store)
    answer = store.load_conversation(conversation_id).messages[1]
    store.select_alternative(answer.id, 0)
    shown = store.load_conversation(conversation_id).messages[1]
    assert shown.id == answer.id and shown.position == 1
    assert (shown.content, shown.figures, shown.version) == ("first answer", FIRST.figures, 0)
    assert versions(shown) == versions(answer)  # the order of the versions never changes
    third = shown.alternatives[1]
    assert (third.content, third.figures) == ("third answer", FULL_FIGURES)
    assert third.created == answer.created  # each version keeps its own time
    store.select_alternative(answer.id, 1)
    assert store.load_conversation(conversation_id).messages[1].content == "second answer"
    with pytest.raises(ValueError, match="3 versions"):
        store.select_alternative(answer.id, 3)
    with pytest.raises(MessageNotFoundError):
        store.select_alternative(10_000, 0)


def test_versions_go_with_their_answer(store: HistoryStore, db_path: Path) -> None:
    conversation_id = regenerated(store)
    question = store.load_conversation(conversation_id).messages[0]
    store.replace_after(question.id, [MessageDraft("assistant", "replaced")])
    assert count_rows(db_path, "alternatives") == 0
    regenerated(store)
    store.delete_conversation(regenerated(store))
    assert count_rows(db_path, "alternatives") == 2  # only the other conversation's


def test_bad_versions_are_refused_and_nothing_written(store: HistoryStore, db_path: Path) -> None:
    for bad in (
        MessageDraft("user", "q", alternatives=(FIRST,)),
        MessageDraft("assistant", "a", alternatives=(FIRST,), version=2),
        MessageDraft("assistant", "a", version=-1),
    ):
        with pytest.raises(ValueError):
            store.add_conversation(ConversationDraft("bad", NOW, NOW, messages=(bad,)))
    assert count_rows(db_path, "messages") == 0


def test_a_version_2_history_gains_the_table_and_keeps_its_answers(db_path: Path) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    migrate(conn, db_path, {1: MIGRATIONS[1], 2: MIGRATIONS[2]})
    conn.execute("INSERT INTO conversations VALUES (1, 'old', ?, ?, NULL, '')", (NOW, NOW))
    conn.execute(
        "INSERT INTO messages (conversation_id, position, role, content, created, "
        "h2d_bytes_per_token) VALUES (1, 0, 'assistant', 'old answer', ?, 4.0)",
        (NOW.isoformat(),),
    )
    conn.close()
    with HistoryStore(db_path) as store:
        (answer,) = store.load_conversation(1).messages
        assert (answer.content, answer.version, answer.alternatives) == ("old answer", 0, ())
        assert answer.figures is not None and answer.figures.h2d_bytes_per_token == 4.0


def test_the_alternatives_table_has_a_column_per_figure(db_path: Path) -> None:
    HistoryStore(db_path).close()
    conn = raw(db_path)
    columns = {r[1]: r[2] for r in conn.execute("PRAGMA table_info(alternatives)")}
    conn.close()
    assert columns.items() >= {f.name: f.sql_type for f in FIGURES}.items()


def test_json_export_carries_the_versions(store: HistoryStore) -> None:
    conversation = store.load_conversation(regenerated(store))
    text = to_json(conversation)
    item = json.loads(text)["conversation"]["messages"][1]
    assert item["version"] == 2
    assert [a["content"] for a in item["alternatives"]] == ["first answer", "second answer"]
    again = store.import_json(text)
    answer, before = again.messages[1], conversation.messages[1]
    assert versions(answer) == versions(before) and answer.version == 2
    assert [(a.content, a.figures, a.created) for a in answer.alternatives] == [
        (a.content, a.figures, a.created) for a in before.alternatives
    ]


def _export_with(item_changes: dict[str, object]) -> str:
    answer = {"role": "assistant", "content": "a", **item_changes}
    return json.dumps(
        {
            "format": "chatapp-conversation",
            "version": 1,
            "conversation": {"title": "t", "messages": [answer]},
        }
    )


@pytest.mark.parametrize(
    ("changes", "where"),
    [
        ({"alternatives": "no"}, "messages[0].alternatives"),
        ({"alternatives": [{"content": 5}]}, "alternatives[0].content"),
        ({"alternatives": [{}]}, "alternatives[0].content"),
        ({"alternatives": [{"content": "b", "figures": {"tokens_per_s": "x"}}]}, "tokens_per_s"),
        ({"alternatives": [{"content": "b"}], "version": 2}, "messages[0].version"),
        ({"alternatives": [{"content": "b"}], "version": True}, "messages[0].version"),
        ({"alternatives": [{"content": "b", "created": "yesterday"}]}, "created"),
    ],
)
def test_bad_versions_in_an_export_are_named(changes: dict[str, object], where: str) -> None:
    with pytest.raises(ImportFormatError, match=where.replace("[", r"\[").replace("]", r"\]")):
        parse_json(_export_with(changes))


def test_a_user_message_with_versions_is_refused() -> None:
    text = _export_with({}).replace('"assistant"', '"user"')
    doc = json.loads(text)
    doc["conversation"]["messages"][0]["alternatives"] = [{"content": "b"}]
    with pytest.raises(ImportFormatError, match="only assistant messages"):
        parse_json(json.dumps(doc))


def test_versions_count_against_the_message_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export_module, "LIMITS", export_module.ImportLimits(messages=3))
    ok = _export_with({"alternatives": [{"content": "b"}, {"content": "c"}]})
    assert len(parse_json(ok).messages[0].alternatives) == 2
    too_many = _export_with({"alternatives": [{"content": str(i)} for i in range(3)]})
    with pytest.raises(ImportTooLargeError, match="other versions of answers included"):
        parse_json(too_many)


def test_markdown_shows_every_version_numbered(store: HistoryStore) -> None:
    conversation_id = regenerated(store)
    answer = store.load_conversation(conversation_id).messages[1]
    store.select_alternative(answer.id, 1)
    text = to_markdown(store.load_conversation(conversation_id), UTC)
    assert "### Assistant · 2026-11-03 12:00 +0000 · version 2 of 3\n\nsecond answer\n" in text
    shown = text.index("second answer")
    assert shown < text.index("#### Other versions (2)")
    assert text.index("#### Other versions (2)") < text.index("> **Version 1 of 3** · 2026")
    assert text.index("> **Version 1 of 3**") < text.index("> first answer")
    assert text.index("> first answer") < text.index("> *Naive loop · 10.0 tokens/s*")
    assert text.index("> *Naive loop") < text.index("> **Version 3 of 3**")
    assert text.index("> **Version 3 of 3**") < text.index("> third answer")
    assert "123.5 tokens/s" in text.split("> third answer")[1]  # its figures came along


def _blocks(markdown: str) -> list[tuple[str, str]]:
    """What a CommonMark reader sees at the top level: (block, its text) in order."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    shown: list[tuple[str, str]] = []
    for i, token in enumerate(tokens):
        if token.level != 0 or not token.type.endswith(("_open", "fence", "code_block", "hr")):
            continue
        if token.type.endswith("_open") and tokens[i + 1].type == "inline":
            shown.append((token.tag, tokens[i + 1].content))
        else:
            shown.append((token.tag or token.type, token.content))
    return shown


def test_markdown_in_other_versions_stays_inside_them(store: HistoryStore) -> None:
    """Headings, rules and an open code fence in an answer cannot pass for the transcript's
    own structure, and the messages after it are still read as messages."""
    hostile = "# Big\n\n---\n\n### User · 2026-01-01 00:00 +0000\n\n```python\nprint('open')"
    draft = ConversationDraft(
        "tricky",
        NOW,
        NOW,
        messages=(
            MessageDraft("user", "show me"),
            MessageDraft("assistant", hostile, None, None, (Alternative(hostile),), 1),
            MessageDraft("user", "thanks"),
        ),
    )
    stored = store.load_conversation(store.add_conversation(draft).id)
    blocks = _blocks(to_markdown(stored, UTC))
    headings = [text for tag, text in blocks if tag in ("h1", "h3", "h4")]
    assert headings == [
        "tricky",
        "User · 2026-11-03 12:00 +0000",
        "Assistant · 2026-11-03 12:00 +0000 · version 2 of 2",
        "Big",  # the shown answer's own Markdown is kept as is (it is the answer) ...
        "User · 2026-01-01 00:00 +0000",
        "Other versions (1)",  # ... but its open fence is closed before the other versions
        "User · 2026-11-03 12:00 +0000",
    ]
    assert ("code", "print('open')\n") in blocks
    assert ("blockquote", "") in blocks  # the other version, whole, in one quote
    assert blocks[-1] == ("p", "thanks")


def test_a_markdown_export_is_not_imported_and_says_what_to_import(store: HistoryStore) -> None:
    conversation_id = regenerated(store)
    text = to_markdown(store.load_conversation(conversation_id), UTC)
    before = store.list_conversations()
    with pytest.raises(ImportFormatError, match=r"Markdown transcript .* JSON export \(\.json\)"):
        store.import_json(text)
    with pytest.raises(ImportFormatError, match="Markdown transcript"):
        store.import_json(text.encode("utf-8-sig"))  # the bytes of a file, as an editor saved it
    assert store.list_conversations() == before
    with pytest.raises(ImportFormatError, match="not valid JSON"):
        store.import_json("# Notes\n\nnot an export")  # other text: the JSON error as before
