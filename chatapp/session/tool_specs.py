"""Tools as a request gives them: OpenAI's `tools` list and `tool_choice`, read into the
engine's `Tool` and `ToolChoice` (engine/structured/tool_calls.py). No Qt.

One reading for every face: `chatapp serve` (server/structured_fields.py turns a
`ToolSpecError` into a 400 naming the field), `chatapp generate --tools FILE` and the window's
Tools option (`tools_from_file`: a file that cannot be used is one sentence). A tool's
parameters are checked as the grammar will read them (engine/structured/json_schema.py,
`check_schema`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.read import read_capped
from chatapp.engine.structured.constraints import (
    MISSING_LIBRARY,
    ConstraintError,
    check_schema,
    library_available,
)
from chatapp.engine.structured.tool_calls import Tool, ToolChoice, argument_schema
from chatapp.json_text import JsonTextError, parse_json_text

MAX_TOOLS = 128  # OpenAI's limit
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function names
MAX_FILE_BYTES = 1 << 20  # a tools file: 128 tools with generous schemas fit in far less
CHOICES = ("auto", "required", "none")  # tool_choice besides a function's name


class ToolSpecError(ValueError):
    """A `tools` or `tool_choice` value that cannot be used: one sentence, and the field."""

    def __init__(self, message: str, where: str) -> None:
        super().__init__(message)
        self.message = message
        self.where = where


def parse_tools(value: Any) -> tuple[Tool, ...]:
    """OpenAI's `tools`: a list of {"type": "function", "function": {...}} (None or []: none)."""
    if value is None or value == []:
        return ()
    if not isinstance(value, list):
        raise ToolSpecError(
            'tools must be a list of {"type": "function", "function": {...}}.', "tools"
        )
    if len(value) > MAX_TOOLS:
        raise ToolSpecError(f"tools takes at most {MAX_TOOLS} functions.", "tools")
    if not library_available():
        raise ToolSpecError(MISSING_LIBRARY.replace("Structured output", "Tool calling"), "tools")
    out = [_tool(item, f"tools[{i}]") for i, item in enumerate(value)]
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise ToolSpecError("tools has two functions with the same name.", "tools")
    return tuple(out)


def _tool(item: Any, where: str) -> Tool:
    if not isinstance(item, dict) or item.get("type") != "function":
        raise ToolSpecError(f'{where} must be {{"type": "function", "function": {{...}}}}.', where)
    function = item.get("function")
    at = f"{where}.function"
    if not isinstance(function, dict):
        raise ToolSpecError(f"{at} must be an object with a name.", at)
    name = function.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
        raise ToolSpecError(f"{at}.name must be 1-64 letters, digits, _ or -.", at)
    description = function.get("description", "")
    if not isinstance(description, str):
        raise ToolSpecError(f"{at}.description must be a string.", at)
    parameters = function.get("parameters", {"type": "object"})
    if not isinstance(parameters, dict):
        raise ToolSpecError(f"{at}.parameters must be a JSON schema object.", at)
    try:
        check_schema(parameters)
        argument_schema(parameters)
    except ConstraintError as exc:
        raise ToolSpecError(f"{at}.parameters: {exc}", at) from exc
    strict = function.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise ToolSpecError(f"{at}.strict must be true or false.", at)
    return Tool(name, description, parameters, bool(strict))


def parse_tool_choice(value: Any, listed: tuple[Tool, ...], parallel: Any = None) -> ToolChoice:
    """OpenAI's `tool_choice`. `parallel`: the request's parallel_tool_calls. Absent, one
    call per answer, as llama.cpp's server does (OpenAI's default is several): a small model
    given the choice repeats its call until max_tokens."""
    where = "tool_choice"
    if parallel is not None and not isinstance(parallel, bool):
        raise ToolSpecError("parallel_tool_calls must be true or false.", "parallel_tool_calls")
    several = parallel is True
    if value is None:
        return ToolChoice("auto" if listed else "none", parallel=several)
    if value in CHOICES:
        if value == "required" and not listed:
            raise ToolSpecError('tool_choice "required" needs tools.', where)
        return ToolChoice(value, parallel=several)
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise ToolSpecError(
            'tool_choice must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}.',
            where,
        )
    if name not in {t.name for t in listed}:
        raise ToolSpecError(f"tool_choice names '{name}', which is not among the tools.", where)
    return ToolChoice("named", name, parallel=several)


def choice_by_word(word: str, listed: tuple[Tool, ...]) -> ToolChoice:
    """A choice as a person types it (`generate --tool-choice`, the window): auto, required,
    none, or a tool's name."""
    if word in CHOICES:
        return parse_tool_choice(word, listed)
    return parse_tool_choice({"type": "function", "function": {"name": word}}, listed)


def tools_from_value(value: Any) -> tuple[Tool, ...]:
    """A tools file's JSON: OpenAI's `tools` list, a bare list of function objects
    ({"name", "description", "parameters"}), or an object with a `tools` list."""
    if isinstance(value, dict) and "tools" in value:
        value = value["tools"]
    if isinstance(value, list):
        value = [
            {"type": "function", "function": item}
            if isinstance(item, dict) and "type" not in item and "name" in item
            else item
            for item in value
        ]
    return parse_tools(value)


def tools_from_file(path: Path) -> tuple[Tool, ...]:
    """The tools a JSON file lists; ToolSpecError with one sentence naming the file when it
    cannot be read or used (an empty list: ToolSpecError too, it gives no tool)."""
    where = path.name
    try:
        if not path.is_file():
            raise ToolSpecError(f"{where} is not a file.", where)
        # Capped as it is read, too: a file that grows after its size was checked is refused.
        value = parse_json_text(read_capped(path, MAX_FILE_BYTES, where).decode("utf-8"))
    except ModelError as exc:  # over the size
        raise ToolSpecError(str(exc), where) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolSpecError(f"{where} cannot be read ({exc}).", where) from exc
    except JsonTextError as exc:
        raise ToolSpecError(f"{where} {exc}.", where) from None
    try:
        tools = tools_from_value(value)
    except ToolSpecError as exc:
        raise ToolSpecError(f"{where}: {exc.message}", where) from exc
    except RecursionError:
        raise ToolSpecError(f"{where} is nested too deeply.", where) from None
    if not tools:
        raise ToolSpecError(f"{where} lists no tool.", where)
    return tools


def tools_as_json(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    """The tools as OpenAI's `tools` list (what tools_from_value reads back)."""
    out = []
    for tool in tools:
        entry = tool.as_dict()
        if tool.strict:
            entry["function"]["strict"] = True
        out.append(entry)
    return out
