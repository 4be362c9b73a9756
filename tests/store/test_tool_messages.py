"""Tool calls and results in the history: the upgrade in place from version 7, the structured
fields stored, exported and imported again, and hostile imports refused with one line."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.figures import FIGURES
from chatapp.engine.text.chat import ToolCall
from chatapp.store import (
    Alternative,
    HistoryStore,
    ImportFormatError,
    MessageDraft,
    StoreError,
)
from chatapp.store.export import FORMAT_VERSION, PLAIN_VERSION
from chatapp.store.schema import CURRENT_VERSION, TOOL_MESSAGES_SINCE
from chatapp.store.transcript import to_markdown
from tests.store.conftest import raw

V7 = Path(__file__).parent.parent / "fixtures" / "history_v7"
CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
OTHER = ToolCall("call_2", "get_time", '{"zone": "CET"}')
CUT = ToolCall("call_3", "get_time", '{"zone": "CE')  # the token limit cut it


def _v7_file(path: Path) -> None:
    """The history a chatapp of schema version 7 wrote (make_v7.py), as its SQL dump."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript((V7 / "history_v7.sql").read_text(encoding="utf-8"))
    conn.execute("PRAGMA user_version=7")
    conn.close()


def _without_later_figures(doc: dict[str, Any]) -> dict[str, Any]:
    """The export less the figures added after version 8, which an older answer lacks (null)."""
    later = [f.name for f in FIGURES if f.since > TOOL_MESSAGES_SINCE]
    for message in doc["conversation"]["messages"]:
        for item in (message, *message.get("alternatives", ())):
            for name in later:
                if "figures" in item:
                    assert item["figures"].pop(name) is None
    return doc


def _comparable(export: str) -> dict[str, Any]:
    doc = json.loads(export)
    del doc["exported"], doc["generator"]
    return doc


def test_a_version_7_history_opens_with_every_chat_as_it_was(db_path: Path) -> None:
    _v7_file(db_path)
    with HistoryStore(db_path) as s:
        assert s.diagnostics()["schema_version"] == CURRENT_VERSION == 9
        infos = s.list_conversations()
        assert sorted(i.title for i in infos) == ["Ducks", "empty", "Ünïcödé 🦆"]
        for info in infos:
            # The export the version 7 chatapp made of the same chat, field for field.
            before = _comparable((V7 / f"conv{info.id}.json").read_text(encoding="utf-8"))
            assert _without_later_figures(_comparable(s.export_json(info.id))) == before, info.title
        ducks = next(i for i in infos if i.title == "Ducks")
        loaded = s.load_conversation(ducks.id)
        assert [m.role for m in loaded.messages] == ["user", "assistant", "user", "assistant"]
        assert loaded.messages[1].alternatives[0].content == "Yes, with one eye open."
        assert all(m.tool_calls == () and m.tool_call_id is None for m in loaded.messages)
        # A tool message and a call fit now; ids deleted before the upgrade stay unused.
        (added,) = s.append_drafts(
            ducks.id,
            [MessageDraft("tool", "18 C", tool_call_id="call_1", tool_name="get_weather")],
        )
        assert added.id > 7  # the version 7 file's AUTOINCREMENT mark
        s.select_alternative(loaded.messages[1].id, 0)  # the alternatives' key still holds
        s.delete_conversation(ducks.id)
    conn = raw(db_path)
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("SELECT count(*) FROM alternatives").fetchone() == (0,)  # cascaded
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_calls_and_results_are_stored_and_read_back(store: HistoryStore) -> None:
    conv = store.create_conversation("tools")
    drafts = [
        MessageDraft("user", "Weather and time in Paris?"),
        MessageDraft(
            "assistant",
            "",
            tool_calls=(CALL, OTHER),
            alternatives=(Alternative("I cannot tell.", tool_calls=()),),
            version=1,
        ),
        MessageDraft("tool", "18 C", tool_call_id="call_1", tool_name="get_weather"),
        MessageDraft("tool", "14:00", tool_call_id="call_2", tool_name="get_time"),
        MessageDraft("assistant", "18 C at 14:00."),
    ]
    store.append_drafts(conv.id, drafts)
    loaded = store.load_conversation(conv.id).messages
    assert loaded[1].tool_calls == (CALL, OTHER) and loaded[1].content == ""
    assert (loaded[2].tool_call_id, loaded[2].tool_name, loaded[2].content) == (
        "call_1",
        "get_weather",
        "18 C",
    )
    # Showing the other version swaps the calls with the text.
    store.select_alternative(loaded[1].id, 0)
    swapped = store.load_conversation(conv.id).messages[1]
    assert swapped.tool_calls == () and swapped.content == "I cannot tell."
    assert swapped.alternatives[0].tool_calls == (CALL, OTHER)
    markdown = to_markdown(store.load_conversation(conv.id))
    assert "### Tool result: get_weather" in markdown and "**Tool call: get_time**" in markdown


@pytest.mark.parametrize(
    "draft",
    [
        MessageDraft("user", "x", tool_calls=(CALL,)),
        MessageDraft("tool", "x"),  # answers no call
        MessageDraft("assistant", "x", tool_call_id="call_1"),
    ],
)
def test_a_message_that_cannot_hold_its_tool_fields_is_refused(
    store: HistoryStore, draft: MessageDraft
) -> None:
    conv = store.create_conversation("bad")
    with pytest.raises(ValueError):
        store.append_drafts(conv.id, [draft])
    assert store.load_conversation(conv.id).messages == ()


def test_a_spoiled_calls_column_is_an_error_naming_the_message(
    store: HistoryStore, db_path: Path
) -> None:
    conv = store.create_conversation("spoiled")
    (answer,) = store.append_drafts(conv.id, [MessageDraft("assistant", "", tool_calls=(CALL,))])
    conn = raw(db_path)
    conn.execute("UPDATE messages SET tool_calls = '[{\"id\": 3}]' WHERE id = ?", (answer.id,))
    conn.close()
    with pytest.raises(StoreError, match=f"message {answer.id} holds tool calls"):
        store.load_conversation(conv.id)


def _tool_chat(store: HistoryStore) -> int:
    conv = store.create_conversation("tools", system_prompt="Use tools.")
    store.append_drafts(
        conv.id,
        [
            MessageDraft("user", "Weather in Paris?"),
            MessageDraft(
                "assistant",
                "Let me look.",
                tool_calls=(CALL,),
                alternatives=(Alternative("", tool_calls=(OTHER, CUT)),),
                version=1,
            ),
            MessageDraft("tool", '{"temp": 18}', tool_call_id="call_1", tool_name="get_weather"),
            MessageDraft("assistant", "18 C."),
        ],
    )
    return conv.id


def test_an_export_with_tools_imports_again_field_for_field(store: HistoryStore) -> None:
    conv_id = _tool_chat(store)
    text = store.export_json(conv_id)
    doc = json.loads(text)
    assert doc["version"] == FORMAT_VERSION == 2  # an older chatapp refuses, drops nothing
    messages = doc["conversation"]["messages"]
    assert messages[1]["tool_calls"] == [
        {"id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert messages[2]["tool_call_id"] == "call_1" and messages[2]["name"] == "get_weather"
    imported = store.import_json(text)
    original = store.load_conversation(conv_id)
    for a, b in zip(original.messages, imported.messages, strict=True):
        assert (a.role, a.content, a.tool_calls, a.tool_call_id, a.tool_name) == (
            b.role,
            b.content,
            b.tool_calls,
            b.tool_call_id,
            b.tool_name,
        )
        assert [o.tool_calls for o in a.alternatives] == [o.tool_calls for o in b.alternatives]


def test_an_older_export_still_imports(store: HistoryStore) -> None:
    for path in sorted(V7.glob("conv*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        assert doc["version"] == PLAIN_VERSION
        imported = store.import_json(path.read_bytes())
        assert len(imported.messages) == len(doc["conversation"]["messages"])
    conv = store.create_conversation("plain")
    store.append_message(conv.id, "user", "hi")
    assert json.loads(store.export_json(conv.id))["version"] == PLAIN_VERSION


def _with_message(store: HistoryStore, index: int, **fields: Any) -> str:
    doc = json.loads(store.export_json(_tool_chat(store)))
    message = doc["conversation"]["messages"][index]
    message.update(fields)
    for key in [k for k, v in fields.items() if v is _DROP]:
        del message[key]
    return json.dumps(doc)


_DROP = object()
DEEP = "[" * 5000 + "]" * 5000
HOSTILE: list[tuple[int, dict[str, Any], str]] = [
    (1, {"tool_calls": "call_1"}, "tool_calls: must be a list of calls, found a string"),
    (1, {"tool_calls": [["call_1"]]}, "tool_calls[0]: must be a JSON object, found a list"),
    (1, {"tool_calls": [{"id": 1, "name": "f", "arguments": "{}"}]}, "id: must be a string"),
    (1, {"tool_calls": [{"id": "a", "name": "f", "arguments": {}}]}, "arguments: must be a str"),
    (1, {"tool_calls": [{"id": "a", "name": "f", "arguments": DEEP}]}, "nested 5000 deep"),
    (1, {"tool_calls": [{"id": "a" * 5000, "name": "f", "arguments": "{}"}]}, "5000 characters"),
    (1, {"tool_calls": [{"id": "a", "name": "f", "arguments": "{}"}] * 65}, "65 calls"),
    (1, {"tool_calls": [{"id": "\ud800", "name": "f", "arguments": "{}"}]}, "lone surrogate"),
    (0, {"tool_calls": [{"id": "a", "name": "f", "arguments": "{}"}]}, "only assistant messages"),
    (2, {"tool_call_id": _DROP}, "tool_call_id: must be a string, found nothing"),
    (2, {"tool_call_id": ["call_1"]}, "tool_call_id: must be a string, found a list"),
    (2, {"name": {"n": 1}}, "name: must be a string, found an object"),
    (3, {"tool_call_id": "call_1"}, "only tool messages answer a call"),
    (2, {"role": "function"}, '"role" must be "user", "assistant" or "tool"'),
]


@pytest.mark.parametrize(("index", "fields", "expected"), HOSTILE)
def test_hostile_tool_fields_are_one_clear_line_and_write_nothing(
    store: HistoryStore, index: int, fields: dict[str, Any], expected: str
) -> None:
    data = _with_message(store, index, **fields)
    before = [(c.id, c.message_count) for c in store.list_conversations()]
    with pytest.raises(ImportFormatError) as info:
        store.import_json(data)
    message = str(info.value)
    assert expected in message and "\n" not in message and len(message) < 300, message
    assert f"conversation.messages[{index}]" in message
    assert [(c.id, c.message_count) for c in store.list_conversations()] == before


def test_an_alternative_s_calls_are_checked_too(store: HistoryStore) -> None:
    bad = [{"content": "", "tool_calls": [{"id": "a", "name": 3, "arguments": "{}"}]}]
    data = _with_message(store, 1, alternatives=bad, version=1)
    with pytest.raises(ImportFormatError, match=r"alternatives\[0\]\.tool_calls\[0\]\.name"):
        store.import_json(data)
