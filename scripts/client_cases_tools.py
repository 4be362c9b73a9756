"""The openai SDK's checks of tools and of the Responses API (see client_cases.py)."""

from __future__ import annotations

import json
from typing import Any

from client_cases import (
    ASK_WEATHER,
    HI,
    WEATHER,
    WEATHER_PARAMS,
    _call_args,
    _city,
    _openai,
    _people,
    check,
    expect,
)


@check("openai", "tools: required gives a call (open schema)")
def tool_required(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model,
        temperature=0,
        messages=ASK_WEATHER,
        tools=[WEATHER],
        tool_choice="required",
        max_tokens=200,
    )
    choice = answer.choices[0]
    expect(choice.finish_reason == "tool_calls", f"finish {choice.finish_reason}")
    args = _call_args(choice.message.tool_calls[0])
    expect(set(args) <= {"city", "unit"} and "city" in args, f"arguments {args}")
    return json.dumps(args)


@check("openai", "tools: a named function")
def tool_named(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model,
        temperature=0,
        messages=ASK_WEATHER,
        tools=[WEATHER],
        max_tokens=200,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    call = answer.choices[0].message.tool_calls[0]
    expect(call.function.name == "get_weather", call.function.name)
    return json.dumps(_call_args(call))


@check("openai", "tools: auto calls for weather")
def tool_auto(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model, messages=ASK_WEATHER, tools=[WEATHER], max_tokens=200, temperature=0
    )
    calls = answer.choices[0].message.tool_calls
    expect(calls, f"answered text: {answer.choices[0].message.content!r}")
    return json.dumps(_call_args(calls[0]))


@check("openai", "tools: pydantic_function_tool ($ref)")
def tool_pydantic(base: str, model: str) -> str:
    import openai

    Person = _people()
    answer = _openai(base).chat.completions.parse(
        model=model,
        temperature=0,
        messages=[{"role": "user", "content": "Record Anna, 30, from Oslo, Norway."}],
        tools=[openai.pydantic_function_tool(Person)],
        tool_choice="required",
        max_tokens=200,
    )
    call = answer.choices[0].message.tool_calls[0]
    expect(isinstance(call.function.parsed_arguments, Person), "arguments not parsed")
    return repr(call.function.parsed_arguments)[:60]


@check("openai", "tools: parallel_tool_calls")
def tool_parallel(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=True,
        messages=[{"role": "user", "content": "What is the weather in Paris and in Rome?"}],
        max_tokens=300,
        temperature=0,
    )
    calls = answer.choices[0].message.tool_calls or []
    expect(calls and answer.choices[0].finish_reason == "tool_calls", "no calls")
    return f"{len(calls)} call(s): " + ", ".join(c.function.arguments for c in calls)


@check("openai", "tools: streamed deltas = whole arguments")
def tool_stream(base: str, model: str) -> str:
    client = _openai(base)
    kw: dict[str, Any] = {
        "model": model,
        "messages": ASK_WEATHER,
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_tokens": 200,
        "temperature": 0,
    }
    whole = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    args = ""
    for chunk in client.chat.completions.create(**kw, stream=True):
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            args += delta.function.arguments or ""
    expect(args == whole.function.arguments, f"{args!r} != {whole.function.arguments!r}")
    return args


@check("openai", "tools + response_format")
def tool_and_format(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model,
        temperature=0,
        messages=[{"role": "user", "content": "Name a city in Spain."}],
        tools=[WEATHER],
        tool_choice="none",
        max_tokens=100,
        response_format={
            "type": "json_schema",
            "json_schema": {
                "name": "city",
                "schema": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}},
                    "required": ["name"],
                },
            },
        },
    )
    value = json.loads(answer.choices[0].message.content or "")
    expect("name" in value, repr(value))
    return repr(value)


@check("openai", "two-turn tool loop")
def tool_loop(base: str, model: str) -> str:
    client = _openai(base)
    first = (
        client.chat.completions.create(
            model=model,
            messages=ASK_WEATHER,
            tools=[WEATHER],
            tool_choice="required",
            max_tokens=200,
            temperature=0,
        )
        .choices[0]
        .message
    )
    call = first.tool_calls[0]
    messages: list[Any] = [
        *ASK_WEATHER,
        first.model_dump(exclude_none=True),
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": '{"temperature": 18, "unit": "celsius", "sky": "sunny"}',
        },
    ]
    final = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER], max_tokens=80, temperature=0
    ).choices[0]
    text = final.message.content or ""
    again = [c.function.arguments for c in final.message.tool_calls or []]
    expect(not again, f"the model called get_weather again after its result: {again}")
    expect(final.finish_reason == "stop" and text.strip(), f"{final.finish_reason}: {text!r}")
    return repr(text[:50])


@check("openai", "responses.create")
def responses_create(base: str, model: str) -> str:
    r = _openai(base).responses.create(
        model=model,
        temperature=0,
        input="Say hello.",
        instructions="You are terse.",
        max_output_tokens=30,
    )
    expect(r.output_text.strip() and r.usage.output_tokens > 0, "empty")
    return repr(r.output_text[:40])


@check("openai", "responses.stream")
def responses_stream(base: str, model: str) -> str:
    # max_output_tokens reached is `response.incomplete`, as OpenAI sends it; the SDK's
    # get_final_response() then raises "Didn't receive a `response.completed` event"
    stream = _openai(base).responses.stream(
        model=model, input="Say hello.", max_output_tokens=200, temperature=0
    )
    with stream as s:
        deltas = [e.delta for e in s if e.type == "response.output_text.delta"]
        final = s.get_final_response()
    expect("".join(deltas) == final.output_text, "deltas != final text")
    return f"{len(deltas)} deltas"


@check("openai", "responses.parse(text_format=model)")
def responses_parse(base: str, model: str) -> str:
    City = _city()
    r = _openai(base).responses.parse(
        model=model,
        temperature=0,
        input="Name a city in Japan.",
        text_format=City,
        max_output_tokens=100,
    )
    expect(isinstance(r.output_parsed, City), "not parsed")
    return repr(r.output_parsed)


@check("openai", "responses: tool call, output, previous_response_id")
def responses_tools(base: str, model: str) -> str:
    client = _openai(base)
    tool = {
        "type": "function",
        "name": "get_weather",
        "description": "Get the weather",
        "parameters": WEATHER_PARAMS,
    }
    first = client.responses.create(
        model=model,
        temperature=0,
        input="What is the weather in Paris?",
        tools=[tool],
        tool_choice="required",
        max_output_tokens=200,
    )
    call = next(o for o in first.output if o.type == "function_call")
    json.loads(call.arguments)
    second = client.responses.create(
        model=model,
        previous_response_id=first.id,
        tools=[tool],
        max_output_tokens=80,
        input=[
            {
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": '{"temperature": 18}',
            }
        ],
    )
    again = [o.arguments for o in second.output if o.type == "function_call"]
    expect(not again, f"the model called get_weather again after its output: {again}")
    expect(second.output_text.strip(), "no text after the tool output")
    got = client.responses.retrieve(second.id)
    expect(got.id == second.id, "not kept")
    client.responses.delete(second.id)
    return f"{call.arguments} -> {second.output_text[:40]!r}"


@check("openai", "AsyncOpenAI stream")
def async_stream(base: str, model: str) -> str:
    import asyncio

    import openai

    async def run() -> str:
        async with openai.AsyncOpenAI(base_url=base, api_key="unused", max_retries=0) as c:
            stream = await c.chat.completions.create(
                model=model, temperature=0, messages=HI, max_tokens=10, stream=True
            )
            return "".join([ch.choices[0].delta.content or "" async for ch in stream])

    text = asyncio.run(run())
    expect(text, "empty")
    return repr(text)
