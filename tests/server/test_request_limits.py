"""Oversize chats are refused before the chat template sees them, and refusing one never
switches chat off for the next request (issue 37: 100 000 tiny messages used to)."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest

from chatapp.engine.text.chat import Message, ToolCall
from chatapp.server.errors import ApiError
from chatapp.server.request_limits import MAX_MESSAGES, check_chat_size
from tests.serving import Served

SAY_HI = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 3}


def post(served: Served, body: dict[str, Any] | bytes) -> httpx2.Response:
    kwargs: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
    return httpx2.post(f"{served.api}/chat/completions", timeout=120, trust_env=False, **kwargs)


def tiny_messages(count: int) -> list[dict[str, str]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"} for i in range(count)]


def test_too_many_messages_are_counted() -> None:
    check_chat_size([Message("user", "hi")] * MAX_MESSAGES, 512, None, "messages")
    with pytest.raises(ApiError) as refused:
        check_chat_size([Message("user", "hi")] * (MAX_MESSAGES + 1), 512, None, "messages")
    assert refused.value.status == 400 and refused.value.code == "too_many_messages"
    assert f"at most {MAX_MESSAGES}" in refused.value.message


@pytest.mark.parametrize(
    "messages",
    [
        [Message("user", "x" * 1001)],
        [Message("user", "x" * 500), Message("assistant", "y" * 501)],
        [Message("assistant", "", tool_calls=(ToolCall("c1", "f", "1" * 1000),))],
    ],
    ids=["one", "several", "tool-arguments"],
)
def test_more_text_than_the_context_holds_is_an_overflow(messages: list[Message]) -> None:
    with pytest.raises(ApiError) as refused:
        check_chat_size(messages, 100, 1000, "messages")
    assert refused.value.code == "context_length_exceeded"
    assert "context holds 100" in refused.value.message


def test_100000_tiny_messages_get_a_400_then_say_hi_works(default_served: Served) -> None:
    body = json.dumps({"messages": tiny_messages(100_000), "max_tokens": 3}).encode()
    assert len(body) > 3_000_000  # the hostile case: 3.4 MB, under the body cap
    for _ in range(2):
        refused = post(default_served, body)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "too_many_messages"
        answer = post(default_served, SAY_HI)
        assert answer.status_code == 200, answer.text
        assert answer.json()["usage"]["completion_tokens"] >= 1
    assert len(default_served.worker.records) == 2  # the refused ones never reached the engine


@pytest.mark.parametrize(
    "body",
    [
        {"messages": tiny_messages(MAX_MESSAGES + 1)},
        {"messages": [{"role": "user", "content": "é" * 3_000_000}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}] * 9000}]},
        {"messages": [{"role": "system", "content": "x" * 100_000}] * 40},
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": f"c{i}", "function": {"name": "f", "arguments": "{}" * 500}}
                        for i in range(1000)
                    ],
                },
                {"role": "user", "content": "hi"},
            ]
        },
    ],
    ids=["one-too-many", "wide-characters", "text-parts", "big-system", "tool-calls"],
)
def test_oversize_chats_are_refused_and_chat_goes_on(served: Served, body: dict[str, Any]) -> None:
    before = len(served.worker.records)
    for stream in (False, True):
        refused = post(served, {**body, "stream": stream})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] in ("too_many_messages", "context_length_exceeded")
        assert error["param"] == "messages" and "\n" not in error["message"]
    assert len(served.worker.records) == before  # counted before the queue
    answer = post(served, SAY_HI)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["role"]


@pytest.mark.parametrize("prompt", ["x" * 2_000_000, ["é" * 2_000_000]], ids=["text", "list"])
def test_a_raw_prompt_longer_than_the_context_can_hold_is_refused_untokenized(
    served: Served, prompt: Any
) -> None:
    before = len(served.worker.records)
    refused = httpx2.post(
        f"{served.api}/completions", json={"prompt": prompt}, timeout=120, trust_env=False
    )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "prompt"
    assert len(served.worker.records) == before
