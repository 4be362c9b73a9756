"""Responses request bodies become the chat path's request; refusals name Responses fields."""

from __future__ import annotations

from typing import Any

import pytest

from chatapp.engine.text.chat import Message, ToolCall
from chatapp.server.errors import ApiError
from chatapp.server.request_limits import MAX_MESSAGES
from chatapp.server.responses_request import ResponsesRequest, input_messages, parse_responses
from chatapp.server.responses_store import ResponseStore, StoredResponse

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def parse(body: dict[str, Any], store: ResponseStore | None = None) -> ResponsesRequest:
    return parse_responses(body, "iobinding", 512, 100_000, store or ResponseStore())


def refused(body: dict[str, Any], store: ResponseStore | None = None) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse(body, store)
    return caught.value


def test_a_string_is_one_user_message_after_the_instructions() -> None:
    parsed = parse({"input": "Say hi", "instructions": "Be brief.", "max_output_tokens": 7})
    assert parsed.request.answer.messages == (
        Message("system", "Be brief."),
        Message("user", "Say hi"),
    )
    assert parsed.conversation == (Message("user", "Say hi"),)  # instructions are not kept
    assert parsed.request.answer.settings.max_new_tokens == 7 and not parsed.request.stream


def test_items_become_the_chat_history() -> None:
    items = [
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Paris?"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
        },
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "sunny"}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
    ]
    calls = (ToolCall("c1", "get_weather", "{}"), ToolCall("c2", "get_weather", "{}"))
    assert input_messages(items) == (
        Message("system", "Use tools."),
        Message("user", "Paris?"),
        Message("assistant", "Let me look.", tool_calls=calls),
        Message("tool", "18 C", tool_call_id="c1"),
        Message("tool", "sunny", tool_call_id="c2"),
    )
    lone = input_messages([{"type": "function_call", "call_id": "c", "name": "f"}])
    assert lone == (Message("assistant", "", tool_calls=(ToolCall("c", "f", "{}"),)),)


def test_tools_choice_and_format_reach_the_chat_request() -> None:
    parsed = parse(
        {
            "input": "Weather?",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
        }
    )
    (tool,) = parsed.request.answer.tools
    assert tool.name == "get_weather" and tool.parameters == WEATHER["parameters"]
    assert (
        parsed.request.answer.tool_choice.mode == "named"
        and parsed.tools[0]["name"] == "get_weather"
    )
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"format": {"type": "json_schema", "name": "A", "schema": schema, "strict": True}}
    parsed = parse({"input": "x", "text": fmt})
    assert parsed.request.answer.output_format is not None
    assert (
        parsed.request.answer.output_format.schema == schema
        and parsed.request.answer.output_format.strict
    )
    assert (
        parse({"input": "x", "text": {"format": {"type": "text"}}}).request.answer.output_format
        is None
    )


def test_previous_response_id_prepends_the_kept_conversation() -> None:
    store = ResponseStore()
    earlier = (Message("user", "Hi"), Message("assistant", "Hello!"))
    store.put("resp_1", StoredResponse({"id": "resp_1"}, earlier))
    parsed = parse({"input": "Again", "previous_response_id": "resp_1"}, store)
    assert parsed.request.answer.messages == (*earlier, Message("user", "Again"))
    assert parsed.previous_response_id == "resp_1"
    missing = refused({"input": "x", "previous_response_id": "resp_gone"}, store)
    assert missing.status == 404 and missing.param == "previous_response_id"


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({}, "input", "input must be"),
        ({"input": []}, "input", "non-empty"),
        ({"input": 7}, "input", "must be text or a non-empty list of items (a number was given)"),
        ({"input": [7]}, "input[0]", "must be an object"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role", "role must be"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input[0].content",
            "only text parts",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]},
            "input[0].content[0].text",
            "string",
        ),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", "takes message"),
        ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id", "non-empty"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
            "string or a list",
        ),
        ({"input": [{"type": "reasoning"}]}, "input", "no message"),
        ({"input": "x", "instructions": ["a"]}, "instructions", "string"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type", "function tools"),
        (
            {"input": "x", "tools": [{"type": "function", "name": "bad name"}]},
            "tools[0]",
            "letters, digits",
        ),
        ({"input": "x", "tools": "f"}, "tools", "must be a list"),
        ({"input": "x", "text": {"format": {"type": "xml"}}}, "text.format.type", "json_schema"),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "a b"}}},
            "text.format.name",
            "letters",
        ),
        ({"input": "x", "max_output_tokens": 0}, "max_output_tokens", "whole number"),
        ({"input": "x", "temperature": 9}, "temperature", "number"),
        ({"input": "x", "background": True}, "background", "not supported"),
        ({"input": "x", "conversation": "conv_1"}, "conversation", "previous_response_id"),
        ({"input": "x", "top_logprobs": 3}, "top_logprobs", "chat/completions"),
        ({"input": "x", "store": "yes"}, "store", "true or false"),
        ({"input": "x", "metadata": {"a": 1}}, "metadata", "string values"),
        ({"input": "x", "previous_response_id": 5}, "previous_response_id", "response id"),
    ],
)
def test_bad_fields_are_400s_that_name_them(body: dict[str, Any], param: str, words: str) -> None:
    error = refused(body)
    assert error.status == 400 and error.param == param, (error.param, error.message)
    assert words in error.message and "response_format" not in error.message
    assert "messages" not in error.message and "\n" not in error.message


def test_oversize_input_is_counted_before_the_template() -> None:
    many = [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)
    assert refused({"input": many}).code == "too_many_messages"
    assert refused({"input": "x" * 100_001}).code == "context_length_exceeded"
    store = ResponseStore()
    earlier = tuple(Message("user", "hi") for _ in range(MAX_MESSAGES))
    store.put("resp_long", StoredResponse({}, earlier))
    chained = refused({"input": "one more", "previous_response_id": "resp_long"}, store)
    assert chained.code == "too_many_messages" and chained.param == "input"
