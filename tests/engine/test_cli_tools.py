"""`chatapp generate --tools FILE --tool-choice CHOICE` as a user runs it (cli/tool_args.py):
the call printed on the default model, and a file that cannot be used refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine.test_cli import chatapp
from tests.weather_tool import WEATHER

pytest.importorskip("llguidance", reason="tool calling needs llguidance")

ASK = ("--prompt", "What is the weather in Paris?", "--greedy", "--max-new-tokens", "40")


def test_the_default_model_calls_the_named_tool(default_model_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"type": "function", "function": WEATHER}]))
    base = ("generate", "--model", str(default_model_dir), *ASK, "--tools", str(path))
    out = chatapp(*base, "--tool-choice", "get_weather")
    assert out.returncode == 0, out.stderr
    _, _, arguments = out.stdout.partition("tool call: get_weather\n")
    assert arguments, out.stdout  # the call, named, on its own line
    assert isinstance(json.loads(arguments)["city"], str)  # pretty JSON, the whole rest
    as_json = chatapp(*base, "--tool-choice", "required", "--json")
    assert as_json.returncode == 0, as_json.stderr
    (call,) = json.loads(as_json.stdout)["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "get_weather"
    assert set(json.loads(call["function"]["arguments"])) <= {"city"}


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        (None, (), "is not a file"),
        ("[{", (), "is not valid JSON"),
        ('{"name": "get_weather"}', (), "tools must be a list"),
        (json.dumps([{**WEATHER, "parameters": {"type": "string"}}]), (), "JSON object"),
        (json.dumps([{**WEATHER, "parameters": {"$ref": "#/$defs/No"}}]), (), "parameters"),
        (json.dumps([WEATHER]), ("--tool-choice", "get_time"), "not among the tools"),
        (json.dumps([WEATHER]), ("--raw",), "--raw"),
    ],
    ids=["missing", "invalid-json", "shape", "not-object", "bad-ref", "choice", "raw"],
)
def test_a_tools_file_that_cannot_be_used_is_one_line(
    tiny_model_dir: Path, tmp_path: Path, content: str | None, extra: tuple[str, ...], message: str
) -> None:
    path = tmp_path / "tools.json"
    if content is not None:
        path.write_text(content)
    args = ("generate", "--model", str(tiny_model_dir), "--prompt", "x", "--tools", str(path))
    out = chatapp(*args, *extra)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_tool_choice_without_tools_is_refused(tiny_model_dir: Path) -> None:
    out = chatapp(
        "generate", "--model", str(tiny_model_dir), "--prompt", "x", "--tool-choice", "auto"
    )
    assert out.returncode == 2 and "--tool-choice needs --tools" in out.stderr
