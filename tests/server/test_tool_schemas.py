"""Tool schemas against a real `chatapp serve`, through the openai SDK (issue 38): objects
closed as llama.cpp closes them, `$ref`s resolved against the tool's own parameters, several
calls in one answer, tools with a response_format, and arguments that read the same streamed
or not. The served model and the tools are tests/server/test_tools.py's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from chatapp.engine.engine import Engine
from chatapp.engine.structured.tool_calls import MAX_PARALLEL_CALLS
from tests.server.test_tools import ASK, CLOCK, TOOLS, WEATHER, check_call
from tests.server.test_tools import served as served  # the roomy model, for this module too
from tests.serving import serving

openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")
pytest.importorskip("llguidance", reason="tool calling needs llguidance")


class Address(BaseModel):
    city: str = Field(max_length=10)
    country: Literal["FR", "IT"]


class Shipment(BaseModel):
    to: Address
    count: int = Field(ge=1, le=9)


def test_a_pydantic_tool_with_a_nested_model_resolves_its_refs(
    client: openai.OpenAI, model: str
) -> None:
    tool = openai.pydantic_function_tool(Shipment)
    assert "$defs" in json.dumps(tool)  # the shape that was refused: "/$defs/Address"
    completion = client.beta.chat.completions.parse(
        model=model,
        messages=ASK,  # type: ignore[arg-type]
        tools=[tool],
        tool_choice="required",
        temperature=1.0,
        seed=4,
        max_tokens=300,
    )
    (call,) = completion.choices[0].message.tool_calls or []
    assert isinstance(call.function.parsed_arguments, Shipment)


def plain(tool: dict[str, Any]) -> dict[str, Any]:
    """The tool as plain dict tools (LangChain's bind_tools, litellm) send it: no
    additionalProperties."""
    parameters = dict(tool["function"]["parameters"])
    del parameters["additionalProperties"]
    return {"type": "function", "function": {**tool["function"], "parameters": parameters}}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_plain_dict_tool_admits_no_other_property(
    client: openai.OpenAI, model: str, seed: int
) -> None:
    answer = client.chat.completions.create(
        model=model,
        messages=ASK,  # type: ignore[arg-type]
        tools=[plain(WEATHER), plain(CLOCK)],  # type: ignore[list-item]
        tool_choice="required",
        temperature=1.0,
        seed=seed,
        max_tokens=300,
    )
    (call,) = answer.choices[0].message.tool_calls or []
    check_call(call)  # exactly the listed properties
    assert answer.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("parallel", [False, True])
def test_parallel_tool_calls(client: openai.OpenAI, model: str, parallel: bool) -> None:
    counts = set()
    for seed in range(4):
        answer = client.chat.completions.create(
            model=model,
            messages=ASK,  # type: ignore[arg-type]
            tools=TOOLS,
            tool_choice="required",
            parallel_tool_calls=parallel,
            temperature=1.0,
            seed=seed,
            max_tokens=500,
        )
        calls = answer.choices[0].message.tool_calls or []
        assert 1 <= len(calls) <= (MAX_PARALLEL_CALLS if parallel else 1)
        assert len({c.id for c in calls}) == len(calls)
        for call in calls:
            check_call(call)
        counts.add(len(calls))
    if not parallel:
        assert counts == {1}


def test_streamed_and_plain_arguments_are_the_same_text(client: openai.OpenAI, model: str) -> None:
    asked: dict[str, Any] = {
        "model": model,
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 200,
    }
    (plain_call,) = client.chat.completions.create(**asked).choices[0].message.tool_calls or []
    pieces = [
        delta.function.arguments or ""
        for chunk in client.chat.completions.create(**asked, stream=True)
        for choice in chunk.choices
        for delta in choice.delta.tool_calls or []
        if delta.function is not None
    ]
    arguments = plain_call.function.arguments
    assert "".join(pieces) == arguments
    assert json.dumps(json.loads(arguments), separators=(",", ":"), ensure_ascii=False) == arguments


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_tools_together_with_a_response_format(
    client: openai.OpenAI, model: str, seed: int
) -> None:
    schema = {
        "type": "object",
        "properties": {"verdict": {"enum": ["sunny", "rainy"]}},
        "required": ["verdict"],
    }
    answer = client.chat.completions.create(
        model=model,
        messages=ASK,  # type: ignore[arg-type]
        tools=TOOLS,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
        temperature=1.0,
        seed=seed,
        max_tokens=300,
    )
    message = answer.choices[0].message
    if message.tool_calls:
        for call in message.tool_calls:
            check_call(call)
        assert answer.choices[0].finish_reason == "tool_calls"
    else:
        assert json.loads(message.content or "") in ({"verdict": "sunny"}, {"verdict": "rainy"})


def test_the_default_model_finishes_a_plain_dict_tool_call(default_model_dir: Path) -> None:
    """Issue 38: without additionalProperties the default model wrote invented properties until
    max_tokens (finish "length"); closed as llama.cpp closes it, the call ends."""
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    }
    with (
        serving(Engine(default_model_dir, threads=1)) as served,
        openai.OpenAI(base_url=served.api, api_key="unused", max_retries=0) as client,
    ):
        answer = client.chat.completions.create(
            model=served.worker.card.id,
            messages=ASK,  # type: ignore[arg-type]
            tools=[weather],  # type: ignore[list-item]
            tool_choice="required",
            temperature=0,
            max_tokens=200,
        )
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict) and "city" in arguments
    assert set(arguments) <= {"city", "unit"}


def test_streamed_parallel_calls_match_the_whole_answer(client: openai.OpenAI, model: str) -> None:
    """Each call's deltas carry its own index (tests/engine/test_tool_stream.py makes several)."""
    for seed in range(4):
        asked: dict[str, Any] = {
            "model": model,
            "messages": ASK,
            "tools": TOOLS,
            "tool_choice": "required",
            "parallel_tool_calls": True,
            "temperature": 1.0,
            "seed": seed,
            "max_tokens": 500,
        }
        whole = client.chat.completions.create(**asked).choices[0].message.tool_calls or []
        streamed: dict[int, list[str]] = {}
        for chunk in client.chat.completions.create(**asked, stream=True):
            for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                assert delta.function is not None
                entry = streamed.setdefault(delta.index, [delta.function.name or "", ""])
                entry[1] += delta.function.arguments or ""
        assert [streamed[i] for i in sorted(streamed)] == [
            [c.function.name, c.function.arguments] for c in whole
        ]
