"""`POST /v1/responses` request bodies, mapped onto the chat completions request.

The Responses API says the same things as chat completions in other words: `instructions`
is a system message, `input` a string or a list of items (messages, `function_call`,
`function_call_output`), `max_output_tokens` is `max_completion_tokens`, a function tool is
flat (`{"type": "function", "name": ...}`), `text.format` is `response_format`. This module
turns the items into the engine's messages and the rest into chat completions fields, and
request_body.chat_request checks them there: one set of rules for both endpoints, one
generation path. A refusal names the Responses field (`input[2].content`, `text.format`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from chatapp.engine.text.chat import Message, ToolCall
from chatapp.server.errors import ApiError, invalid
from chatapp.server.request_body import ROLES, GenerationRequest, chat_request
from chatapp.server.request_limits import check_chat_size, check_message_count
from chatapp.server.responses_store import ResponseStore

# Chat completions fields that mean the same in a Responses body.
SAME_FIELDS = ("temperature", "top_p", "stream", "parallel_tool_calls", "chatapp", "model")
# chatapp's own extensions of chat completions, accepted here too.
EXTENSIONS = ("seed", "top_k", "repetition_penalty")
UNSUPPORTED = {
    "background": "background responses are not supported by chatapp.",
    "conversation": "conversations are not kept by chatapp; use previous_response_id.",
    "prompt": "prompt templates are not supported by chatapp; send instructions and input.",
}
TEXT_PARTS = ("input_text", "output_text", "text")
MAX_METADATA_KEYS = 16


@dataclass(frozen=True)
class ResponsesRequest:
    """A Responses request: what the engine runs, and what the response echoes and keeps."""

    request: GenerationRequest
    conversation: tuple[Message, ...]  # previous response's, then this input (no instructions)
    instructions: str | None
    tools: tuple[dict[str, Any], ...]  # as the response lists them
    tool_choice: Any
    text_format: dict[str, Any]
    max_output_tokens: int | None
    previous_response_id: str | None
    store: bool
    metadata: dict[str, str]
    parallel_tool_calls: bool


def parse_responses(
    body: dict[str, Any],
    default_mode: str,
    max_context: int,
    max_chars: int | None,
    store: ResponseStore,
) -> ResponsesRequest:
    for name, message in UNSUPPORTED.items():
        if body.get(name):
            raise invalid(message, name)
    if body.get("top_logprobs"):
        raise invalid(
            "top_logprobs is not supported on /v1/responses by chatapp; use "
            "/v1/chat/completions with logprobs.",
            "top_logprobs",
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions must be a string.", "instructions")
    previous_id, earlier = _previous(body.get("previous_response_id"), store)
    raw = body.get("input")
    check_message_count(len(earlier) + (len(raw) if isinstance(raw, list) else 1), "input")
    conversation = (*earlier, *input_messages(raw))
    system = (Message("system", instructions),) if instructions else ()
    messages: tuple[Message, ...] = (*system, *conversation)
    check_chat_size(messages, max_context, max_chars, "input")
    tools = tuple(_tool(t, i) for i, t in enumerate(_list(body.get("tools"), "tools")))
    text_format = _text_format(body.get("text"))
    chat_body = {name: body[name] for name in (*SAME_FIELDS, *EXTENSIONS) if name in body}
    chat_body.update(
        tools=[{"type": "function", "function": _without_type(t)} for t in tools] or None,
        tool_choice=_chat_tool_choice(body.get("tool_choice")),
        response_format=_chat_response_format(text_format),
        max_completion_tokens=body.get("max_output_tokens"),
    )
    try:
        request = chat_request(chat_body, messages, default_mode, max_context)
    except ApiError as exc:
        raise _in_responses_words(exc) from None
    return ResponsesRequest(
        request=request,
        conversation=conversation,
        instructions=instructions,
        tools=tools,
        tool_choice=body.get("tool_choice") or ("auto" if tools else "none"),
        text_format=text_format,
        max_output_tokens=body.get("max_output_tokens"),
        previous_response_id=previous_id,
        store=_flag(body, "store", True),
        metadata=_metadata(body.get("metadata")),
        parallel_tool_calls=_flag(body, "parallel_tool_calls", True),
    )


def input_messages(value: Any) -> tuple[Message, ...]:
    """`input` as messages: a string is one user message; items in order, a function_call
    joining the assistant message before it (chat's `tool_calls`)."""
    if isinstance(value, str):
        return (Message("user", value),)
    if not isinstance(value, list) or not value:  # 42, an object, null: say what it takes
        got = "empty" if isinstance(value, list) else f"a {_json_kind(value)}"
        raise invalid(
            f"input must be text or a non-empty list of items ({got} was given), e.g. "
            '"input": "Hello" or "input": [{"role": "user", "content": "Hello"}].',
            "input",
        )
    items = value
    out: list[Message] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise invalid(f"{where} must be an object such as a message.", where)
        kind = item.get("type", "message")
        if kind == "message":
            out.append(_message(item, where))
        elif kind == "function_call":
            call = _call(item, where)
            last = out[-1] if out else None
            if last is not None and last.role == "assistant" and last.tool_call_id is None:
                out[-1] = replace(last, tool_calls=(*last.tool_calls, call))
            else:
                out.append(Message("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            call_id = _text(item.get("call_id"), f"{where}.call_id", empty=False)
            output = _content(item.get("output"), f"{where}.output", "function_call_output")
            out.append(Message("tool", output, tool_call_id=call_id))
        elif kind == "reasoning":
            continue  # another model's reasoning summary: nothing this model reads
        else:
            raise invalid(
                f"{where}.type: chatapp takes message, function_call and function_call_output "
                f"items (got {str(kind)[:40]!r}).",
                f"{where}.type",
            )
    if not out:
        raise invalid("input holds no message.", "input")
    return tuple(out)


def _message(item: dict[str, Any], where: str) -> Message:
    role = item.get("role")
    if role not in ROLES or role == "tool":
        raise invalid(
            f"{where}.role must be user, assistant, system or developer (got {role!r}).",
            f"{where}.role",
        )
    return Message(ROLES[role], _content(item.get("content"), f"{where}.content", role))


def _content(value: Any, where: str, role: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise invalid(f"{where} must be a string or a list of text parts.", where)
    texts = []
    for j, part in enumerate(value):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "refusal" and isinstance(part, dict):
            texts.append(_text(part.get("refusal"), f"{where}[{j}].refusal"))
        elif kind in TEXT_PARTS and isinstance(part, dict):
            texts.append(_text(part.get("text"), f"{where}[{j}].text"))
        else:
            raise invalid(
                f"{where}[{j}]: only text parts are supported (got {str(kind)[:40]!r}).", where
            )
    return "\n".join(texts)


def _call(item: dict[str, Any], where: str) -> ToolCall:
    call_id = _text(item.get("call_id"), f"{where}.call_id", empty=False)
    name = _text(item.get("name"), f"{where}.name", empty=False)
    arguments = _text(item.get("arguments", "{}"), f"{where}.arguments")
    return ToolCall(call_id, name, arguments)


def _previous(value: Any, store: ResponseStore) -> tuple[str | None, tuple[Message, ...]]:
    if value is None:
        return None, ()
    if not isinstance(value, str) or not value:
        raise invalid("previous_response_id must be a response id.", "previous_response_id")
    stored = store.get(value)
    if stored is None:
        raise ApiError(
            404,
            f"Previous response with id '{value[:100]}' not found: chatapp keeps the last "
            "responses in memory for a while (not across restarts, not with store false).",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return value, stored.messages


def _tool(value: Any, i: int) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(value, dict):
        raise invalid(f'{where} must be {{"type": "function", "name": ...}}.', where)
    if value.get("type") != "function":
        raise invalid(
            f"{where}.type: chatapp serves function tools only (got "
            f"{str(value.get('type'))[:40]!r}).",
            f"{where}.type",
        )
    tool = {"type": "function", "name": value.get("name")}
    tool["description"] = value.get("description")
    tool["parameters"] = value.get("parameters", {"type": "object"})
    tool["strict"] = value.get("strict")  # unset: as chat completions (lenient)
    return tool


def _without_type(tool: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in tool.items() if k != "type" and v is not None}
    out.setdefault("description", "")
    return out


def _chat_tool_choice(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") == "function" and "name" in value:
        return {"type": "function", "function": {"name": value["name"]}}
    return value


def _text_format(value: Any) -> dict[str, Any]:
    if value is None:
        return {"type": "text"}
    if not isinstance(value, dict):
        raise invalid('text must be an object such as {"format": {"type": "text"}}.', "text")
    fmt = value.get("format", {"type": "text"})
    if not isinstance(fmt, dict):
        raise invalid('text.format must be an object such as {"type": "json_schema", ...}.')
    return fmt


def _chat_response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    if fmt.get("type") != "json_schema":
        return fmt
    spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
    return {"type": "json_schema", "json_schema": spec}


def _in_responses_words(exc: ApiError) -> ApiError:
    """A chat completions refusal with the Responses API's field names."""
    renames = [
        (r"response_format\.json_schema\.|response_format\.", "text.format."),
        (r"response_format", "text.format"),
        (r"max_completion_tokens", "max_output_tokens"),
        (r"(tools\[\d+\])\.function", r"\1"),
        (r"messages", "input"),
    ]
    message, param = exc.message, exc.param
    for pattern, to in renames:
        message = re.sub(pattern, to, message)
        param = re.sub(pattern, to, param) if param else param
    return ApiError(exc.status, message, param=param, code=exc.code, kind=exc.kind)


def _json_kind(value: Any) -> str:
    """What JSON calls `value`'s type, for a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else type(value).__name__  # str: never here


def _list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid(f"{where} must be a list.", where)
    return value


def _text(value: Any, where: str, empty: bool = True) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise invalid(f"{where} must be a{'' if empty else ' non-empty'} string.", where)
    return value


def _flag(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise invalid(f"{name} must be true or false.", name)
    return value


def _metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if (
        not isinstance(value, dict)
        or len(value) > MAX_METADATA_KEYS
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    ):
        raise invalid(
            f"metadata must be an object of at most {MAX_METADATA_KEYS} string values.",
            "metadata",
        )
    return {k[:64]: v[:512] for k, v in value.items()}
