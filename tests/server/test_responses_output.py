"""/v1/responses through the openai SDK (`responses.create`, `.stream`, `.parse`) against
the default model, and the event stream read raw: its order, indices and ends.

The default model's words are its own: the tests check shapes, statuses, token counts and
what the grammar guarantees (a call to the named tool, JSON that fits the schema), never the
wording."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from pydantic import BaseModel, Field

from chatapp.engine.engine import Engine
from chatapp.engine.structured.tool_calls import StreamPiece
from chatapp.engine.text.chat import ToolCall
from chatapp.server.app import ShutdownNotice, build_app
from chatapp.server.responses_output import ResponsesReply
from chatapp.server.responses_request import parse_responses
from chatapp.server.responses_store import ResponseStore
from chatapp.server.runner import ServerThread, bind
from chatapp.server.worker import Delta, Done, EngineWorker
from tests.serving import Served, slow_down

openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def client(default_served: Served) -> Iterator[Any]:
    with openai.OpenAI(base_url=default_served.api, api_key="unused", max_retries=0) as c:
        yield c


def raw_events(served: Served, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    with httpx2.stream(
        "POST",
        f"{served.api}/responses",
        json={**body, "stream": True},
        timeout=120,
        trust_env=False,
    ) as response:
        assert response.status_code == 200, response.read()
        for event in httpx2.EventSource(response):
            out.append((event.event, json.loads(event.data)))
    return out


def test_create_answers_text_with_usage(client: Any) -> None:
    response = client.responses.create(
        model="gpt-4o", input="Say hi", instructions="Be brief.", max_output_tokens=8
    )
    assert response.object == "response" and response.id.startswith("resp_")
    assert response.status in ("completed", "incomplete") and response.output_text
    assert response.instructions == "Be brief." and response.model != "gpt-4o"
    (message,) = response.output
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "output_text"
    usage = response.usage
    assert 1 <= usage.output_tokens <= 8 and usage.input_tokens > 5
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    if usage.output_tokens == 8:
        assert response.status == "incomplete"
        assert response.incomplete_details.reason == "max_output_tokens"


def test_stream_events_add_up_to_the_final_response(client: Any) -> None:
    with client.responses.stream(
        model="m",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "Count to 3"}]}],
        max_output_tokens=12,
    ) as stream:
        events = list(stream)
        # Cut by max_output_tokens, the stream ends in response.incomplete (as OpenAI's do),
        # and only a completed one is the SDK's "final response".
        final = stream.get_final_response() if events[-1].type == "response.completed" else None
    final = final or events[-1].response
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == final.output_text and final.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_previous_response_id_carries_the_conversation(client: Any) -> None:
    first = client.responses.create(model="m", input="My name is Ada.", max_output_tokens=4)
    second = client.responses.create(
        model="m", input="What is my name?", previous_response_id=first.id, max_output_tokens=4
    )
    alone = client.responses.create(model="m", input="What is my name?", max_output_tokens=4)
    assert second.previous_response_id == first.id
    # The earlier turn and its answer are in the prompt: more input tokens than alone.
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens
    kept = client.responses.retrieve(first.id)
    assert kept.id == first.id and kept.output_text == first.output_text
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="m", input="x", previous_response_id=first.id)
    unkept = client.responses.create(model="m", input="x", store=False, max_output_tokens=2)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)


def test_a_function_call_then_its_output(client: Any) -> None:
    pytest.importorskip("llguidance", reason="tool calling needs llguidance")
    asked = client.responses.create(
        model="m",
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=40,
    )
    calls = [o for o in asked.output if o.type == "function_call"]
    assert asked.status == "completed" and calls
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
    assert isinstance(json.loads(call.arguments)["city"], str)
    assert asked.tools[0].name == "get_weather"
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}
    answer = {"tools": [WEATHER], "tool_choice": "none", "max_output_tokens": 6}
    answered = client.responses.create(
        model="m", previous_response_id=asked.id, input=[output], **answer
    )
    assert answered.output[0].type == "message" and answered.usage.output_tokens >= 1
    # The same conversation sent whole, as items: the very same prompt.
    item = {"type": "function_call", "call_id": call.call_id, "name": call.name}
    whole = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {**item, "arguments": call.arguments},
        output,
    ]
    sent_whole = client.responses.create(model="m", input=whole, **answer)
    assert sent_whole.usage.input_tokens == answered.usage.input_tokens


def test_a_streamed_function_call(client: Any) -> None:
    pytest.importorskip("llguidance", reason="tool calling needs llguidance")
    with client.responses.stream(
        model="m",
        input="Weather in Rome?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=40,
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    (call,) = [o for o in final.output if o.type == "function_call"]
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert json.loads(deltas) == json.loads(done.arguments) == json.loads(call.arguments)
    assert events[-1].type == "response.completed"


def test_text_format_json_schema_parses(client: Any) -> None:
    pytest.importorskip("llguidance", reason="structured output needs llguidance")

    class City(BaseModel):  # bounded: the small model would write on until max tokens
        name: str = Field(max_length=20)
        population: int = Field(ge=0, le=10**9)

    parsed = client.responses.parse(
        model="m", input="Name a city.", text_format=City, max_output_tokens=60
    )
    assert parsed.status == "completed" and isinstance(parsed.output_parsed, City)
    assert parsed.text.format.type == "json_schema"


@pytest.mark.parametrize(
    "body",
    [
        {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
        {"input": "x", "tools": [{"type": "file_search", "vector_store_ids": ["v"]}]},
        {"input": [{"role": "user", "content": "hi"}] * 5000},
        {"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": 5}}},
        {"input": [{"type": "function_call_output", "call_id": "", "output": "x"}]},
        {"input": "hi", "instructions": "x" * 3_000_000},
        {"input": "hi", "previous_response_id": "resp_" + "0" * 48},
    ],
    ids=[
        "image",
        "hosted-tool",
        "too-many",
        "bad-schema",
        "empty-call-id",
        "huge-instructions",
        "unknown-previous",
    ],
)
def test_bad_requests_are_refused_and_later_ones_work(
    default_served: Served, client: Any, body: dict[str, Any]
) -> None:
    before = len(default_served.worker.records)
    for stream in (False, True):
        response = httpx2.post(
            f"{default_served.api}/responses",
            json={**body, "stream": stream},
            timeout=60,
            trust_env=False,
        )
        assert response.status_code in (400, 404), response.text
        error = response.json()["error"]
        assert error["param"] and "\n" not in error["message"]
    assert len(default_served.worker.records) == before
    assert client.responses.create(model="m", input="Say hi", max_output_tokens=2).output_text


def test_raw_stream_indices_and_items_agree(default_served: Served) -> None:
    events = raw_events(default_served, {"input": "Hello", "max_output_tokens": 5})
    names = [name for name, _ in events]
    assert all(name == data["type"] for name, data in events)
    created, completed = events[0][1]["response"], events[-1][1]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert completed["id"] == created["id"] and names[-1] in (
        "response.completed",
        "response.incomplete",
    )
    done_items = [data["item"] for name, data in events if name == "response.output_item.done"]
    assert completed["output"] == done_items
    assert "chatapp" in completed and completed["usage"]["output_tokens"] <= 5


def test_shutdown_ends_a_stream_with_an_error_and_a_failed_response(
    tiny_model_dir: Path,
) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    gate = threading.Event()
    undo = slow_down(engine, 0.0, gate)  # the model is held before its first step
    worker = EngineWorker(engine, "iobinding")
    notice = ShutdownNotice()
    server = ServerThread.start(build_app(worker, shutdown=notice), bind("127.0.0.1", 0))
    events: list[tuple[str, dict[str, Any]]] = []
    try:
        body = {"input": "hi", "max_output_tokens": 400, "temperature": 0, "stream": True}
        with httpx2.stream(
            "POST", f"{server.url}/v1/responses", json=body, timeout=60, trust_env=False
        ) as response:
            for event in httpx2.EventSource(response):
                events.append((event.event, json.loads(event.data)))
                if event.event == "response.in_progress":
                    notice.trigger()
    finally:
        gate.set()
        undo()
        server.stop()
        worker.close()
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "error",
        "response.failed",
    ]
    (error_name, error), (failed_name, failed) = events[-2], events[-1]
    assert error_name == "error" and error["code"] == "server_shutting_down"
    assert failed_name == "response.failed" and failed["response"]["status"] == "failed"
    assert failed["response"]["error"]["code"] == "server_shutting_down"


# ---- the reply alone, fed the worker's events (no model) -----------------------------------
def reply_for(body: dict[str, Any], store: ResponseStore | None = None) -> ResponsesReply:
    kept = store if store is not None else ResponseStore()
    parsed = parse_responses(body, "iobinding", 512, None, kept)
    return ResponsesReply(parsed, "served-model", kept)


def decode(chunks: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for chunk in chunks:
        name, data = chunk.decode().strip().split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        out.append(event)
    return out


def test_text_then_two_calls_become_three_items_in_order() -> None:
    store = ResponseStore()
    reply = reply_for({"input": "hi", "tools": [WEATHER]}, store)
    chunks = reply.opening()
    chunks += reply.delta(Delta("Let me ", ()))
    chunks += reply.delta(Delta("look.", ()))
    chunks += reply.delta(Delta("", (), StreamPiece(call_id="c1", name="get_weather")))
    chunks += reply.delta(Delta("", (), StreamPiece(arguments='{"city":')))
    chunks += reply.delta(Delta("", (), StreamPiece(arguments='"Paris"}')))
    chunks += reply.delta(Delta("", (), StreamPiece(call_id="c2", name="get_weather")))
    chunks += reply.delta(Delta("", (), StreamPiece(arguments='{"city":"Rome"}')))
    calls = (
        ToolCall("c1", "get_weather", '{"city":"Paris"}'),
        ToolCall("c2", "get_weather", '{"city":"Rome"}'),
    )
    chunks += reply.closing(Done("tool_calls", 10, 12, {}, calls))
    events = decode(chunks)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added == ["message", "function_call", "function_call"]
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["status"] == "completed"
    message, paris, rome = final["output"]
    assert message["content"][0]["text"] == "Let me look." and message["status"] == "completed"
    assert (paris["call_id"], paris["arguments"]) == ("c1", '{"city":"Paris"}')
    assert (rome["call_id"], rome["arguments"]) == ("c2", '{"city":"Rome"}')
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["item"] for e in done] == final["output"]
    assert [e["output_index"] for e in done] == [0, 1, 2]
    kept = store.get(reply.id)
    assert kept is not None
    (kept_message,) = kept.messages[1:]  # after the user's "hi"
    assert kept_message.content == "Let me look." and kept_message.tool_calls == calls


def test_a_whole_response_cut_by_max_output_tokens_is_incomplete() -> None:

    reply = reply_for({"input": "hi", "max_output_tokens": 2, "store": False})
    reply.add(Delta("Hel", ()))
    reply.add(Delta("lo", ()))
    body = reply.whole(Done("length", 5, 2, {"loop": "naive"}))
    assert body["status"] == "incomplete" and body["store"] is False
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][0]["content"][0]["text"] == "Hello"
    assert body["output"][0]["status"] == "incomplete"
    assert body["usage"]["total_tokens"] == 7 and body["chatapp"] == {"loop": "naive"}
    assert len(reply.store) == 0  # store false: nothing kept


def test_an_empty_answer_is_one_empty_message() -> None:

    reply = reply_for({"input": "hi"})
    events = decode([*reply.opening(), *reply.closing(Done("stop", 5, 0, {}))])
    kinds = [e["type"] for e in events]
    assert "response.output_item.added" in kinds and kinds[-1] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == ""
