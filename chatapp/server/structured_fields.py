"""The request fields of structured output and tool calling, checked field by field.

`response_format` (text, json_object, json_schema), `tools`, `tool_choice`, and the tool parts
of messages (an assistant's `tool_calls`, `tool` messages). Every refusal is a 400 that names
the field; a schema the grammar library refuses is found when the job starts, still as a 400.
"""

from __future__ import annotations

import re
from typing import Any

from chatapp.engine.chat import Message, ToolCall
from chatapp.engine.constraints import (
    MISSING_LIBRARY,
    ConstraintError,
    OutputFormat,
    check_schema,
    library_available,
)
from chatapp.engine.tool_calls import Tool, ToolChoice, argument_schema
from chatapp.server.errors import invalid

MAX_TOOLS = 128  # OpenAI's limit
FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # OpenAI's rule for function names


def response_format(value: Any) -> OutputFormat | None:
    where = "response_format"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid('response_format must be an object such as {"type": "json_object"}.', where)
    kind = value.get("type")
    if kind == "text":
        return None
    if kind not in ("json_object", "json_schema"):
        raise invalid(
            f"response_format.type must be text, json_object or json_schema (got {kind!r}).",
            f"{where}.type",
        )
    if not library_available():
        raise invalid(MISSING_LIBRARY, where)
    if kind == "json_object":
        return OutputFormat.json_object()
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise invalid(
            "response_format.json_schema must be an object with name and schema.",
            f"{where}.json_schema",
        )
    name = spec.get("name")
    if name is not None and not (isinstance(name, str) and FUNCTION_NAME.fullmatch(name)):
        raise invalid(
            "response_format.json_schema.name must be 1-64 letters, digits, _ or -.",
            f"{where}.json_schema.name",
        )
    schema = spec.get("schema", {"type": "object"})
    strict = spec.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(
            "response_format.json_schema.strict must be true or false.",
            f"{where}.json_schema.strict",
        )
    try:
        return OutputFormat.json_schema(schema, bool(strict))
    except ConstraintError as exc:
        raise invalid(str(exc), f"{where}.json_schema.schema") from exc


def tools(value: Any) -> tuple[Tool, ...]:
    if value is None or value == []:
        return ()
    if not isinstance(value, list):
        raise invalid('tools must be a list of {"type": "function", "function": {...}}.', "tools")
    if len(value) > MAX_TOOLS:
        raise invalid(f"tools takes at most {MAX_TOOLS} functions.", "tools")
    if not library_available():
        raise invalid(MISSING_LIBRARY.replace("Structured output", "Tool calling"), "tools")
    out = [_tool(item, f"tools[{i}]") for i, item in enumerate(value)]
    names = [t.name for t in out]
    if len(set(names)) != len(names):
        raise invalid("tools has two functions with the same name.", "tools")
    return tuple(out)


def _tool(item: Any, where: str) -> Tool:
    if not isinstance(item, dict) or item.get("type") != "function":
        raise invalid(f'{where} must be {{"type": "function", "function": {{...}}}}.', where)
    function = item.get("function")
    if not isinstance(function, dict):
        raise invalid(f"{where}.function must be an object with a name.", f"{where}.function")
    name = function.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.fullmatch(name):
        raise invalid(
            f"{where}.function.name must be 1-64 letters, digits, _ or -.", f"{where}.function"
        )
    description = function.get("description", "")
    if not isinstance(description, str):
        raise invalid(f"{where}.function.description must be a string.", f"{where}.function")
    parameters = function.get("parameters", {"type": "object"})
    if not isinstance(parameters, dict):
        raise invalid(
            f"{where}.function.parameters must be a JSON schema object.", f"{where}.function"
        )
    try:
        check_schema(parameters)
        argument_schema(parameters)
    except ConstraintError as exc:
        raise invalid(f"{where}.function.parameters: {exc}", f"{where}.function") from exc
    strict = function.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"{where}.function.strict must be true or false.", f"{where}.function")
    return Tool(name, description, parameters, bool(strict))


def tool_choice(value: Any, listed: tuple[Tool, ...], parallel: Any = None) -> ToolChoice:
    """`parallel`: the request's parallel_tool_calls. Absent, one call per answer, as
    llama.cpp's server does (OpenAI's default is several): a small model given the choice
    repeats its call until max_tokens."""
    where = "tool_choice"
    if parallel is not None and not isinstance(parallel, bool):
        raise invalid("parallel_tool_calls must be true or false.", "parallel_tool_calls")
    several = parallel is True
    if value is None:
        return ToolChoice("auto" if listed else "none", parallel=several)
    if value in ("none", "auto", "required"):
        if value == "required" and not listed:
            raise invalid('tool_choice "required" needs tools.', where)
        return ToolChoice(value, parallel=several)
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise invalid(
            'tool_choice must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}.',
            where,
        )
    if name not in {t.name for t in listed}:
        raise invalid(f"tool_choice names '{name}', which is not among the tools.", where)
    return ToolChoice("named", name, parallel=several)


def tool_message(item: dict[str, Any], content: str, where: str) -> Message:
    call_id = item.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.tool_call_id must be the id of the call it answers.", where)
    return Message("tool", content, tool_call_id=call_id)


def assistant_calls(value: Any, where: str) -> tuple[ToolCall, ...]:
    if value is None or value == []:
        return ()
    if not isinstance(value, list):
        raise invalid(f"{where}.tool_calls must be a list of calls.", where)
    calls = []
    for j, call in enumerate(value):
        at = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise invalid(f"{at} must have a function with name and arguments.", at)
        name, arguments = function.get("name"), function.get("arguments", "{}")
        call_id = call.get("id") or f"call_{j}"
        if (
            not isinstance(name, str)
            or not isinstance(arguments, str)
            or not isinstance(call_id, str)
        ):
            raise invalid(f"{at}: id, function.name and function.arguments must be strings.", at)
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)
