"""tools / tool_choice against a real `chatapp serve`, through the openai SDK.

The tiny model's template knows no tools, so these run the generic format (the tools in the
system prompt, a bare JSON call); tests/engine/test_tool_calls.py covers templates that do.
A random model calls a tool only because the grammar makes it: "required" and a named function
must always give a valid call, "none" never one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from tests.serving import Served, serving
from tests.tiny_model import write_tiny_gguf

openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")
pytest.importorskip("llguidance", reason="tool calling needs llguidance")

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}},
            "required": ["zone"],
            "additionalProperties": False,
        },
    },
}
TOOLS: list[Any] = [WEATHER, CLOCK]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The untied tiny model with room for the tools' description (its byte-level vocabulary
    spends a token per character: 512 tokens of context do not hold two tools)."""
    folder = tmp_path_factory.mktemp("roomy")
    gguf = write_tiny_gguf(folder / "roomy.gguf", tied=False, seed=1, context=2048)
    model_dir = convert_gguf(gguf, folder / "roomy-llama", ConvertOptions())
    with serving(Engine(model_dir, threads=1)) as s:
        yield s


def check_call(call: Any) -> None:
    assert call.type == "function" and call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("C", "F")
        assert isinstance(arguments["city"], str) and len(arguments["city"]) <= 12
    else:
        assert call.function.name == "get_time"
        assert set(arguments) == {"zone"} and -12 <= arguments["zone"] <= 14


@pytest.mark.parametrize("loop", ["naive", "iobinding"])
def test_required_gives_a_valid_call(client: openai.OpenAI, model: str, loop: str) -> None:
    for seed in (1, 2, 3):
        answer = client.chat.completions.create(
            model=model,
            messages=ASK,  # type: ignore[arg-type]
            tools=TOOLS,
            tool_choice="required",
            temperature=1.0,
            seed=seed,
            max_tokens=200,
            extra_body={"chatapp": {"loop": loop}},
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        (call,) = choice.message.tool_calls or []
        check_call(call)


def test_a_named_function_is_the_one_called(client: openai.OpenAI, model: str) -> None:
    for name in ("get_weather", "get_time"):
        answer = client.chat.completions.create(
            model=model,
            messages=ASK,  # type: ignore[arg-type]
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": name}},
            temperature=1.0,
            seed=4,
            max_tokens=200,
        )
        (call,) = answer.choices[0].message.tool_calls or []
        assert call.function.name == name
        check_call(call)


def test_none_answers_text(client: openai.OpenAI, model: str) -> None:
    answer = client.chat.completions.create(
        model=model,
        messages=ASK,  # type: ignore[arg-type]
        tools=TOOLS,
        tool_choice="none",
        temperature=0,
        max_tokens=10,
    )
    choice = answer.choices[0]
    assert not choice.message.tool_calls and choice.finish_reason != "tool_calls"


def test_auto_answers_text_or_a_valid_call(client: openai.OpenAI, model: str) -> None:
    for seed in range(6):
        answer = client.chat.completions.create(
            model=model,
            messages=ASK,  # type: ignore[arg-type]
            tools=TOOLS,
            temperature=1.0,
            seed=seed,
            max_tokens=40,
        )
        choice = answer.choices[0]
        if choice.message.tool_calls:
            (call,) = choice.message.tool_calls
            check_call(call)
            assert choice.finish_reason == "tool_calls"
        else:  # the grammar lets text through only when it does not start like a call
            assert not (choice.message.content or "").lstrip().startswith("{")


def test_streamed_call_deltas_as_openai_sends_them(client: openai.OpenAI, model: str) -> None:
    args: dict[str, Any] = {
        "model": model,
        "messages": ASK,
        "tools": TOOLS,
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 200,
    }
    whole = client.chat.completions.create(**args).choices[0].message.tool_calls or []
    chunks = list(client.chat.completions.create(stream=True, **args))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    first, rest = deltas[0], deltas[1:]
    assert first.index == 0 and first.id and first.type == "function"
    assert first.function is not None and first.function.name == whole[0].function.name
    assert first.function.arguments == ""
    assert rest and all(d.id is None and d.function and d.function.name is None for d in rest)
    arguments = "".join(d.function.arguments or "" for d in rest if d.function)
    assert json.loads(arguments) == json.loads(whole[0].function.arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_call_cut_by_max_tokens_is_a_partial_call(client: openai.OpenAI, model: str) -> None:
    args: dict[str, Any] = {
        "model": model,
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": "required",
        "temperature": 0,
        "max_tokens": 45,  # past the name, inside the arguments
    }
    choice = client.chat.completions.create(**args).choices[0]
    assert choice.finish_reason == "length"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather" and call.function.arguments.startswith('{"')
    chunks = list(client.chat.completions.create(stream=True, **args))
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    streamed = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert streamed == call.function.arguments
    assert chunks[-1].choices[0].finish_reason == "length"
    head_only = client.chat.completions.create(**{**args, "max_tokens": 5}).choices[0]
    assert head_only.message.content and not head_only.message.tool_calls  # the text, as is


def test_the_sdk_assembles_a_streamed_call(client: openai.OpenAI, model: str) -> None:
    with client.beta.chat.completions.stream(
        model=model,
        messages=ASK,  # type: ignore[arg-type]
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
        temperature=1.0,
        seed=9,
        max_tokens=200,
    ) as stream:
        final = stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls or []
    check_call(call)


def test_pydantic_function_tools_parse(client: openai.OpenAI, model: str) -> None:
    class Lookup(BaseModel):
        word: str = Field(max_length=10)
        language: str = Field(max_length=5)

    completion = client.beta.chat.completions.parse(
        model=model,
        messages=ASK,  # type: ignore[arg-type]
        tools=[openai.pydantic_function_tool(Lookup)],
        tool_choice="required",
        temperature=1.0,
        seed=3,
        max_tokens=200,
    )
    (call,) = completion.choices[0].message.tool_calls or []
    assert isinstance(call.function.parsed_arguments, Lookup)


def test_a_conversation_with_calls_and_results(client: openai.OpenAI, model: str) -> None:
    messages: list[Any] = [
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"},
    ]
    answer = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, temperature=0, max_tokens=5
    )
    assert answer.choices[0].finish_reason in ("length", "stop", "tool_calls")


@pytest.mark.parametrize(
    ("extra", "param", "words"),
    [
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "not among the tools",
        ),
        ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "must be"),
        ({"tools": [WEATHER, WEATHER]}, "tools", "same name"),
        (
            {"tools": [{"type": "function", "function": {"name": "bad name"}}]},
            "tools[0].function",
            "letters",
        ),
        ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or"),
        (
            {
                "tools": [
                    {
                        "type": "function",
                        "function": {"name": "f", "parameters": {"type": "string"}},
                    }
                ]
            },
            "tools[0].function",
            "JSON object",
        ),
        ({"functions": [{"name": "f"}]}, "functions", "use tools"),
    ],
)
def test_bad_tool_requests_get_a_400(
    served: Served, extra: dict[str, Any], param: str, words: str
) -> None:
    import httpx2

    body = {"messages": ASK, **extra}
    response = httpx2.post(f"{served.api}/chat/completions", json=body, timeout=60, trust_env=False)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"]


def test_a_bad_parameter_schema_gets_a_400(served: Served) -> None:
    import httpx2

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "objectx"}}}
    body = {"messages": ASK, "tools": [tool], "tool_choice": "required", "stream": True}
    response = httpx2.post(f"{served.api}/chat/completions", json=body, timeout=60, trust_env=False)
    assert response.status_code == 400
    assert response.json()["error"]["param"].startswith("tools")


def test_the_default_model_calls_a_tool(default_model_dir: Path) -> None:
    with (
        serving(Engine(default_model_dir, threads=1)) as served,
        openai.OpenAI(base_url=served.api, api_key="unused", max_retries=0) as client,
    ):
        answer = client.chat.completions.create(
            model=served.worker.card.id,
            messages=ASK,  # type: ignore[arg-type]
            tools=[WEATHER],
            tool_choice="required",
            temperature=0,
            max_tokens=60,
        )
    (call,) = answer.choices[0].message.tool_calls or []
    check_call(call)
