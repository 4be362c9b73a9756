"""What a chat remembers of how it was answered, through the history store and back."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.structured.tool_calls import Tool
from chatapp.engine.text.chat import PLAIN_CHAT_STOPS, STYLE_CONTINUE, STYLE_PLAIN_CHAT
from chatapp.session.chat import GenerationOptions
from chatapp.session.chat_settings import ChatSettings, remember, settings_of
from chatapp.session.history_records import conversation_from_store
from chatapp.session.prompt_style import CHAT, CONTINUE
from chatapp.store import ConversationDraft, HistoryStore, MessageDraft

SAMPLING = SamplingSettings(temperature=0.3, top_k=7, top_p=0.8, seed=42, max_new_tokens=99)


def test_an_answer_request_is_remembered_and_read_back() -> None:
    options = GenerationOptions(SAMPLING, Mode.NAIVE, " Be brief. ", None, ("END",), STYLE_CONTINUE)
    chat = settings_of(options, "tiny-base")
    assert chat == ChatSettings("tiny-base", "Be brief.", SAMPLING, STYLE_CONTINUE, ("END",))
    back = ChatSettings.from_store(chat.model, chat.system_prompt, chat.to_json())
    assert back == chat and back.choice == CONTINUE


def test_an_answers_minimum_is_not_a_chat_setting() -> None:
    """Text continuation's one-token minimum is set per answer: it is neither stored nor read
    back from a stored or imported chat (one could otherwise keep a model from ending)."""
    chat = ChatSettings("m", "", SamplingSettings(min_new_tokens=1), STYLE_CONTINUE)
    assert "min_new_tokens" not in chat.to_json()
    body = '{"sampling": {"temperature": 0.5, "min_new_tokens": 100000}}'
    back = ChatSettings.from_store("m", "", body)
    assert back.sampling == SamplingSettings(temperature=0.5)


def test_plain_line_chat_gives_back_only_the_stops_the_person_typed() -> None:
    chat = ChatSettings(None, "", None, STYLE_PLAIN_CHAT, ("END", *PLAIN_CHAT_STOPS))
    assert chat.choice == CHAT and chat.user_stops == ("END",)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{}",
        "not json",
        "[1, 2]",
        '{"sampling": {"temperature": -1}, "prompt_style": "poetry", "stops": "x"}',
        '{"sampling": {"temperature": 1e999, "top_k": true}, "stops": [1, "", "ok"]}',
        "[" * 100_000 + "]" * 100_000,  # nested too deeply: RecursionError, no ValueError
        '{"sampling": ' + "[" * 100_000 + "]" * 100_000 + ', "stops": ["ok"]}',
        '{"tools": [' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "]}",
    ],
)
def test_what_cannot_be_read_is_left_out(text: str) -> None:
    chat = ChatSettings.from_store("m", "sys", text)
    assert chat.model == "m" and chat.system_prompt == "sys"
    assert chat.prompt_style is None and chat.choice is None
    assert chat.sampling is None or chat.sampling == SamplingSettings()
    assert chat.stops in ((), ("ok",))


def test_remember_writes_the_stored_chat_and_opening_it_reads_it(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        now = datetime.now(UTC)
        stored = store.add_conversation(
            ConversationDraft("t", now, now, "old-model", "", (MessageDraft("user", "hi"),))
        )
        chat = ChatSettings("tiny", "Be brief.", SAMPLING, STYLE_CONTINUE, ("END",))
        assert remember(store, stored.id, chat)
        assert not remember(store, None, chat)  # not stored yet: nothing to write
        opened = conversation_from_store(store.load_conversation(stored.id))
        assert opened.settings == chat
        (info,) = store.list_conversations()
        assert info.model == "tiny"
    finally:
        store.close()


def test_a_chat_from_before_knows_only_its_model_and_prompt() -> None:
    assert not ChatSettings.from_store("m", "sys", "{}").known
    assert ChatSettings.from_store("m", "", '{"prompt_style": "continue"}').known


def test_a_chat_s_settings_travel_through_its_json_export(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history.sqlite3")
    try:
        now = datetime.now(UTC)
        stored = store.add_conversation(
            ConversationDraft("t", now, now, None, "", (MessageDraft("user", "hi"),))
        )
        chat = ChatSettings("tiny", "Be brief.", SAMPLING, STYLE_PLAIN_CHAT, ("END",))
        assert remember(store, stored.id, chat)
        imported = store.import_json(store.export_json(stored.id))
        assert imported.id != stored.id
        assert conversation_from_store(store.load_conversation(imported.id)).settings == chat
    finally:
        store.close()


def test_a_chats_tools_are_remembered_and_read_back() -> None:
    pytest.importorskip("llguidance", reason="tools are read only where they can be used")
    weather = Tool("get_weather", "The weather", {"type": "object", "properties": {}})
    options = GenerationOptions(SAMPLING, Mode.IOBINDING, tools=(weather,), tool_choice="required")
    chat = settings_of(options, "tiny")
    assert chat.tools == (weather,) and chat.tool_choice == "required"
    assert ChatSettings.from_store("tiny", "", chat.to_json()) == chat
    # Without tools the choice is not kept; an older chat (no "tools" key) has none.
    assert settings_of(GenerationOptions(SAMPLING, Mode.IOBINDING, tool_choice="none"), None) == (
        settings_of(GenerationOptions(SAMPLING, Mode.IOBINDING), None)
    )
    assert ChatSettings.from_store("m", "", '{"stops": []}').tools == ()


@pytest.mark.parametrize(
    "tools",
    [
        '"get_weather"',
        '[{"type": "function", "function": {"name": "two words"}}]',
        '[{"name": "f", "parameters": {"type": "string"}}]',
    ],
)
def test_tools_that_cannot_be_used_are_left_out(tools: str) -> None:
    chat = ChatSettings.from_store("m", "", f'{{"tools": {tools}, "tool_choice": "required"}}')
    assert chat.tools == () and chat.tool_choice == "auto"


@pytest.mark.parametrize(
    "given,seed,max_new_tokens",
    [
        ({"seed": 2**70, "max_new_tokens": 2**31}, None, 8192),
        ({"seed": -5, "max_new_tokens": 0}, None, 1),
        ({"seed": 2**31 - 1, "max_new_tokens": 8192}, 2**31 - 1, 8192),
        ({"seed": 1e300, "max_new_tokens": 1e300}, None, 8192),
    ],
)
def test_stored_values_beyond_the_window_are_brought_in_and_the_rest_restored(
    given: dict[str, float], seed: int | None, max_new_tokens: int
) -> None:
    sampling = {"temperature": 0.3, "top_k": 7, **given}
    text = json.dumps({"sampling": sampling, "stops": ["END"]})
    restored = ChatSettings.from_store("m", "be brief", text)
    assert restored.sampling is not None
    assert restored.sampling.seed == seed
    assert restored.sampling.max_new_tokens == max_new_tokens
    assert (restored.sampling.temperature, restored.sampling.top_k) == (0.3, 7)
    assert restored.user_stops == ("END",) and restored.system_prompt == "be brief"


@pytest.mark.parametrize("text", ["x", "é", '\\n"'])
def test_a_tools_file_at_its_cap_survives_the_apps_own_export_and_import(
    tmp_path: Path, text: str
) -> None:
    """The settings column holds the tools as the session stores them; the export's import
    limit must let the app's own export of them back in (it refused one near the cap)."""
    from chatapp.session.tool_specs import MAX_FILE_BYTES, tools_from_file
    from chatapp.store import HistoryStore

    tool = {
        "type": "function",
        "function": {"name": "look_up", "description": "", "parameters": {}},
    }
    room = MAX_FILE_BYTES - len(json.dumps([tool], ensure_ascii=False).encode()) - 64
    unit = len(json.dumps(text, ensure_ascii=False).encode()) - 2
    tool["function"]["description"] = text * (room // unit)
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([tool], ensure_ascii=False), encoding="utf-8")
    assert MAX_FILE_BYTES - 200 < path.stat().st_size <= MAX_FILE_BYTES
    tools = tools_from_file(path)
    stops = tuple(f"stop {i} " + "s" * 190 for i in range(8))
    chat = ChatSettings("m", "", SamplingSettings(), CHAT, stops, tools, "auto")
    with HistoryStore(tmp_path / "history.sqlite3") as store:
        conv = store.create_conversation("tools at the cap")
        store.append_message(conv.id, "user", "hi")
        assert remember(store, conv.id, chat)
        imported = store.import_json(store.export_json(conv.id))
    back = ChatSettings.from_store("m", "", imported.info.settings)
    assert back.tools == tools and back.user_stops == stops
