"""Markdown and JSON export, JSON import round trip, and refusing bad files."""

from __future__ import annotations

import json
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from chatapp.store import HistoryStore, ImportFormatError, StoredConversation, StoreError
from chatapp.store.export import FORMAT, PLAIN_VERSION
from chatapp.store.transcript import to_markdown
from tests.store.conftest import FULL_FIGURES

TEXT = "Grüße 👋\n\n```python\nprint('hi')\n```"


@pytest.fixture
def conversation(store: HistoryStore) -> StoredConversation:
    conv = store.create_conversation(
        "Ducks & geese 🦆", model="tiny", system_prompt="Be kind.\nBe brief."
    )
    store.append_message(conv.id, "user", "Why do ducks float?")
    store.append_message(conv.id, "assistant", TEXT, FULL_FIGURES)
    store.append_message(conv.id, "user", "Thanks")
    return store.load_conversation(conv.id)


def test_markdown_export(conversation: StoredConversation) -> None:
    md = to_markdown(conversation, tz=UTC)
    assert md.startswith("# Ducks & geese 🦆\n")
    assert "> Be kind.\n> Be brief." in md
    assert "### User · 2026-11-03 12:00 +0000" in md
    # The order of the transcript is kept, the answer's Markdown is kept as is.
    assert md.index("Why do ducks float?") < md.index(TEXT) < md.index("Thanks")
    figures = md.split(TEXT)[1].split("###")[0]
    for part in (
        "SmolLM2-135M-Instruct (model_gguf.onnx) · cpu",  # the variant that wrote it
        "IO-Binding loop · exact ·",  # the precision the answer was written at
        "123.5 tokens/s",
        "TTFT 42 ms",
        "perplexity 3.14",
        "42 prompt tokens",
        "64 generated tokens",
        "cpu",
    ):
        assert part in figures


def test_json_export_is_the_documented_format(
    store: HistoryStore, conversation: StoredConversation
) -> None:
    doc = json.loads(store.export_json(conversation.id))
    assert (
        doc["format"] == FORMAT and doc["version"] == PLAIN_VERSION == 1
    )  # a chat without tool calls
    conv = doc["conversation"]
    assert conv["title"] == "Ducks & geese 🦆"
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant", "user"]
    assert conv["messages"][1]["figures"] == FULL_FIGURES.to_dict()
    assert "figures" not in conv["messages"][0]
    assert conv["messages"][0]["created"].endswith("+00:00")


def test_json_import_round_trip(
    store: HistoryStore, conversation: StoredConversation, tmp_path: Path
) -> None:
    path = tmp_path / "ducks.json"
    path.write_text(store.export_json(conversation.id), encoding="utf-8")
    imported = store.import_file(path)
    assert imported.id != conversation.id
    assert store.list_conversations()[0].id == imported.id  # shows at the top
    for field in ("title", "model", "system_prompt", "created", "message_count"):
        assert getattr(imported.info, field) == getattr(conversation.info, field)

    def essence(c: StoredConversation) -> list[tuple[Any, ...]]:
        return [(m.position, m.role, m.content, m.created, m.figures) for m in c.messages]

    assert essence(imported) == essence(conversation)
    # And exporting the import gives the same conversation again.
    again = json.loads(store.export_json(imported.id))["conversation"]
    first = json.loads(store.export_json(conversation.id))["conversation"]
    assert {**again, "updated": None} == {**first, "updated": None}


def test_import_accepts_minimal_file(store: HistoryStore) -> None:
    doc = {
        "format": FORMAT,
        "version": 1,
        "conversation": {"title": "t", "messages": [{"role": "user", "content": "hi"}]},
    }
    conv = store.import_json(json.dumps(doc))
    assert [m.content for m in conv.messages] == ["hi"]
    assert conv.info.system_prompt == "" and conv.info.model is None


def _valid() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": 1,
        "conversation": {
            "title": "t",
            "created": "2026-01-01T00:00:00+00:00",
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a", "figures": {"tokens_per_s": 1.5}},
            ],
        },
    }


def _with(path: str, value: Any) -> bytes:
    doc = _valid()
    *parents, last = path.split(".")
    target: Any = doc
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    target[int(last) if last.isdigit() else last] = value
    return json.dumps(doc).encode()


BAD_FILES = [
    (b"", "not valid JSON"),
    (b'{"format": "chatapp-conversation", "version": 1', "not valid JSON"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"[1, 2]", "top level: must be a JSON object"),
    (_with("format", "something-else"), '"format" must be'),
    (_with("version", 3), "newer chatapp"),
    (_with("version", "1"), "whole number"),
    (_with("conversation", None), "at conversation"),
    (_with("conversation.title", 5), "conversation.title: must be a string"),
    (_with("conversation.messages", {}), "conversation.messages: must be a list"),
    (_with("conversation.messages.0.role", "system"), "messages[0]"),
    (_with("conversation.messages.1.content", None), "messages[1].content"),
    (_with("conversation.messages.0.figures", {"tokens_per_s": 1}), "only assistant"),
    (_with("conversation.messages.1.figures", {"prompt_tokens": "12"}), "prompt_tokens"),
    (_with("conversation.messages.1.figures", {"generated_tokens": -1}), "generated_tokens"),
    (_with("conversation.messages.1.figures", {"ttft_s": True}), "ttft_s"),
    (_with("conversation.created", "2026-01-01T00:00:00"), "UTC offset"),
    (_with("conversation.created", "yesterday"), "conversation.created"),
    (json.dumps(_valid()).replace("1.5", "NaN").encode(), "NaN"),
    (_with("conversation.settings", ["temperature"]), "conversation.settings"),
    (_with("conversation.settings", {"stops": ["\ud800"]}), "lone surrogate"),
]


@pytest.mark.parametrize(("data", "expected"), BAD_FILES)
def test_bad_import_is_a_clear_error_and_writes_nothing(
    store: HistoryStore, data: bytes, expected: str
) -> None:
    before = store.list_conversations()
    with pytest.raises(ImportFormatError) as info:
        store.import_json(data)
    assert expected in str(info.value)
    assert str(info.value).startswith("This is not a chatapp conversation export")
    assert store.list_conversations() == before
    assert store.has_external_changes() is False


def test_the_valid_base_document_imports(store: HistoryStore) -> None:
    # Guards the table above: each bad file differs from this one in one place only.
    conv = store.import_json(json.dumps(_valid()).encode())
    assert conv.messages[1].figures is not None
    assert conv.messages[1].figures.tokens_per_s == 1.5


def test_import_of_a_missing_file(store: HistoryStore, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="Could not read"):
        store.import_file(tmp_path / "nope.json")


def test_a_remote_answer_names_the_server_s_model_once() -> None:
    from chatapp.store.models import Figures
    from chatapp.store.transcript import figures_line

    remote = Figures(mode="remote", device="remote", model="SmolLM2", tokens_per_s=40.0)
    line = figures_line(remote)
    assert line.startswith("remote · SmolLM2 · 40.0 tokens/s")
    assert "remote · remote" not in line
    assert figures_line(Figures(mode="remote", device="remote")) == "remote server"
    local = figures_line(Figures(mode="naive", device="cpu", model="SmolLM2"))
    assert local == "SmolLM2 · cpu · Naive loop"


def test_settings_are_exported_and_imported_as_an_object(store: HistoryStore) -> None:
    conv = store.create_conversation("t")
    store.append_message(conv.id, "user", "hi")
    assert "settings" not in json.loads(store.export_json(conv.id))["conversation"]  # none yet
    settings = {"prompt_style": "continue", "stops": ["END"], "later": {"kept": [1, 2]}}
    store.update_conversation(conv.id, settings=json.dumps(settings))
    exported = json.loads(store.export_json(conv.id))["conversation"]
    assert exported["settings"] == settings
    imported = store.import_json(store.export_json(conv.id))
    assert json.loads(imported.info.settings) == settings


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_stored_settings_nested_too_deeply_are_left_out_of_the_export(
    store: HistoryStore, depth: int
) -> None:
    """The history is the app's own file, read as input (issue 48): settings a hand-edited
    or damaged file nests too deeply raised RecursionError from the export."""
    conv = store.create_conversation("t")
    store.append_message(conv.id, "user", "hi")
    store.update_conversation(conv.id, settings='{"a": ' + "[" * depth + "]" * depth + "}")
    exported = json.loads(store.export_json(conv.id))["conversation"]
    assert "settings" not in exported and exported["messages"][0]["content"] == "hi"


def test_settings_too_large_are_refused_whole(store: HistoryStore) -> None:
    from chatapp.store import ImportTooLargeError
    from chatapp.store.export import LIMITS

    data = _with("conversation.settings", {"system": "x" * LIMITS.settings_chars})
    with pytest.raises(ImportTooLargeError, match="settings"):
        store.import_json(data)
    assert store.list_conversations() == []
