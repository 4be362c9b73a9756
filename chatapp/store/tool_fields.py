"""An answer's tool calls as the history keeps them: JSON text in the `tool_calls` column and
a list in a JSON export, checked the same way whichever file they come from.

A call is {"id": str, "name": str, "arguments": str}: the arguments are JSON text, as the
OpenAI API carries them and as chatapp.engine.text.chat.ToolCall holds them. A file is hostile input
(an import, a hand-edited database): every field is type-checked and bounded, and the
arguments nest at most MAX_DEPTH deep, so that rendering them for the model's template later
(which parses them) cannot recurse without end. A bad field raises
ImportFormatError naming its place; nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from chatapp.engine.text.chat import ToolCall
from chatapp.json_text import nesting_depth
from chatapp.store.errors import ImportFormatError

MAX_CALLS = 64  # in one answer (the engine makes at most 8)
MAX_NAME_CHARS = 1000  # a call's id and its tool's name
MAX_ARGUMENTS_CHARS = 1 << 20
MAX_DEPTH = 64


def calls_json(calls: Sequence[ToolCall]) -> str | None:
    """The column's text: None for an answer without calls."""
    if not calls:
        return None
    return json.dumps([call_dict(c) for c in calls], ensure_ascii=False)


def call_dict(call: ToolCall) -> dict[str, str]:
    return {"id": call.id, "name": call.name, "arguments": call.arguments}


def calls_from_json(text: str | None, where: str) -> tuple[ToolCall, ...]:
    """The column's calls (ImportFormatError if the file holds something else)."""
    if text is None:
        return ()
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        raise ImportFormatError("is not a JSON list of calls", where) from None
    return calls_from(value, where)


def calls_from(raw: Any, where: str) -> tuple[ToolCall, ...]:
    """An export's (or the column's) list of calls, checked."""
    if not isinstance(raw, list):
        raise ImportFormatError(f"must be a list of calls, found {_kind(raw)}", where)
    if len(raw) > MAX_CALLS:
        raise ImportFormatError(f"has {len(raw)} calls; at most {MAX_CALLS} are imported", where)
    calls = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ImportFormatError(f"must be a JSON object, found {_kind(item)}", at)
        call_id = text_field(item.get("id"), f"{at}.id", MAX_NAME_CHARS)
        name = text_field(item.get("name"), f"{at}.name", MAX_NAME_CHARS)
        arguments = text_field(item.get("arguments"), f"{at}.arguments", MAX_ARGUMENTS_CHARS)
        check_arguments(arguments, f"{at}.arguments")
        calls.append(ToolCall(call_id, name, arguments))
    return tuple(calls)


def check_arguments(text: str, where: str) -> None:
    """Nested at most MAX_DEPTH deep (counted without parsing: a file of ten thousand brackets
    costs one pass and no recursion). Not necessarily whole JSON: a call the token limit cut
    keeps its arguments so far (the engine's ToolCall renders those as text)."""
    deepest = nesting_depth(text)
    if deepest > MAX_DEPTH:
        raise ImportFormatError(f"is JSON nested {deepest} deep; at most {MAX_DEPTH}", where)


def text_field(value: Any, where: str, max_chars: int = 1000) -> str:
    if not isinstance(value, str):
        raise ImportFormatError(f"must be a string, found {_kind(value)}", where)
    if len(value) > max_chars:
        raise ImportFormatError(
            f"is {len(value)} characters long; at most {max_chars} are imported", where
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ImportFormatError("holds a lone surrogate, which is not text", where) from None
    return value


def _kind(value: Any) -> str:
    """What was found, named by its JSON type (never the value: it may be huge)."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__
