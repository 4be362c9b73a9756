"""Tools read from a request's value or a file: what is accepted, and the one sentence for
what is not (session/tool_specs.py; the server's 400s read the same, tests/server)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatapp.engine.structured.tool_calls import Tool, ToolChoice
from chatapp.session.tool_specs import (
    MAX_FILE_BYTES,
    ToolSpecError,
    choice_by_word,
    parse_tool_choice,
    parse_tools,
    tools_as_json,
    tools_from_file,
    tools_from_value,
)

pytest.importorskip("llguidance", reason="tool calling needs llguidance")

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def test_openai_tools_and_bare_functions_read_the_same() -> None:
    openai_form = tools_from_value([{"type": "function", "function": WEATHER}])
    bare = tools_from_value([WEATHER])
    wrapped = tools_from_value({"tools": [WEATHER]})
    assert openai_form == bare == wrapped
    (tool,) = bare
    assert tool.name == "get_weather"
    assert tool.parameters["required"] == ["city"]


def test_tools_round_trip_through_their_json() -> None:
    tools = (Tool("a", "first", {"type": "object"}, strict=True), Tool("b"))
    assert tools_from_value(json.loads(json.dumps(tools_as_json(tools)))) == tools


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({"type": "function"}, "tools must be a list"),
        ([{"type": "function", "function": {"name": "bad name"}}], "letters, digits"),
        ([WEATHER, WEATHER], "same name"),
        ([{**WEATHER, "parameters": {"type": "string"}}], "must describe a JSON object"),
        ([{**WEATHER, "parameters": {"$ref": "#/$defs/Nowhere"}}], "parameters"),
    ],
)
def test_a_value_that_cannot_be_used_is_one_sentence(value: object, words: str) -> None:
    with pytest.raises(ToolSpecError) as caught:
        tools_from_value(value)
    assert words in caught.value.message
    assert "\n" not in caught.value.message


def test_tool_choice_by_word_and_by_name() -> None:
    tools = parse_tools([{"type": "function", "function": WEATHER}])
    assert choice_by_word("auto", tools) == ToolChoice("auto")
    assert choice_by_word("required", tools) == ToolChoice("required")
    assert choice_by_word("get_weather", tools) == ToolChoice("named", "get_weather")
    assert parse_tool_choice(None, ()) == ToolChoice("none")
    with pytest.raises(ToolSpecError, match="not among the tools"):
        choice_by_word("get_time", tools)
    with pytest.raises(ToolSpecError, match="needs tools"):
        choice_by_word("required", ())


def test_a_file_is_read_or_refused_with_its_name(tmp_path: Path) -> None:
    good = tmp_path / "tools.json"
    good.write_text(json.dumps([WEATHER]), encoding="utf-8")
    assert [t.name for t in tools_from_file(good)] == ["get_weather"]
    cases = {
        "missing.json": (None, "is not a file"),
        "broken.json": ("[{", "is not valid JSON"),
        "shape.json": ('{"name": 3}', "tools must be a list"),
        "empty.json": ("[]", "lists no tool"),
        "binary.json": (b"\xff\xfe\x00", "cannot be read"),
        "huge.json": (b" " * (MAX_FILE_BYTES + 1) + b"[]", "more than 1 MB is refused"),
    }
    for name, (content, words) in cases.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content, encoding="utf-8")
        with pytest.raises(ToolSpecError) as caught:
            tools_from_file(path)
        assert caught.value.message.startswith(name), caught.value.message
        assert words in caught.value.message
        assert "\n" not in caught.value.message
