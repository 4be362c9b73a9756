"""The request fields of structured output and tool calling, checked field by field.

`response_format` (text, json_object, json_schema), `tools`, `tool_choice`, and the tool parts
of messages (an assistant's `tool_calls`, `tool` messages). Every refusal is a 400 that names
the field; a schema the grammar library refuses is found when the job starts, still as a 400.
"""

from __future__ import annotations

from typing import Any

from chatapp.engine.structured.constraints import (
    MISSING_LIBRARY,
    ConstraintError,
    OutputFormat,
    library_available,
)
from chatapp.engine.structured.tool_calls import Tool, ToolChoice
from chatapp.engine.text.chat import Message, ToolCall
from chatapp.server.errors import invalid
from chatapp.session import tool_specs

FUNCTION_NAME = tool_specs.FUNCTION_NAME


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
    try:
        return tool_specs.parse_tools(value)
    except tool_specs.ToolSpecError as exc:
        raise invalid(exc.message, exc.where) from exc


def tool_choice(value: Any, listed: tuple[Tool, ...], parallel: Any = None) -> ToolChoice:
    """`parallel`: the request's parallel_tool_calls (session/tool_specs.py)."""
    try:
        return tool_specs.parse_tool_choice(value, listed, parallel)
    except tool_specs.ToolSpecError as exc:
        raise invalid(exc.message, exc.where) from exc


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
