"""The client checks of langchain-openai, instructor, litellm and the `llm` CLI (see
client_cases.py; these run in the separate venv that has those clients)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from client_cases import ASK_WEATHER, HI, WEATHER, _city, _openai, _people, check, expect


# ---- langchain-openai -------------------------------------------------------------------
def _chat_model(base: str, model: str, **kw: Any) -> Any:
    from langchain_openai import ChatOpenAI

    kw.setdefault("temperature", 0)  # greedy: the same answer at every run
    return ChatOpenAI(
        base_url=base,
        api_key="unused",
        model=model,
        max_retries=0,
        timeout=300,
        **kw,
    )


def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather in a city.

    Args:
        city: the city
        unit: celsius or fahrenheit
    """
    return f"18 degrees {unit} in {city}"


@check("langchain", "invoke")
def lc_invoke(base: str, model: str) -> str:
    reply = _chat_model(base, model, max_tokens=30).invoke("Say hello.")
    expect(isinstance(reply.content, str) and reply.content.strip(), "empty")
    return repr(reply.content[:40])


@check("langchain", "stream")
def lc_stream(base: str, model: str) -> str:
    parts = [c.content for c in _chat_model(base, model, max_tokens=20).stream("Say hello.")]
    expect("".join(str(p) for p in parts).strip(), "empty")
    return f"{len(parts)} chunks"


@check("langchain", "batch (concurrent)")
def lc_batch(base: str, model: str) -> str:
    replies = _chat_model(base, model, max_tokens=10).batch(["Say hi.", "Say bye.", "Say yes."])
    expect(len(replies) == 3 and all(r.content for r in replies), "missing replies")
    return "3 replies"


@check("langchain", "with_structured_output (json_schema)")
def lc_structured(base: str, model: str) -> str:
    City = _city()
    out = (
        _chat_model(base, model, max_tokens=100)
        .with_structured_output(City)
        .invoke("Name a city in France.")
    )
    expect(isinstance(out, City), repr(out))
    return repr(out)


@check("langchain", "with_structured_output nested ($defs)")
def lc_structured_nested(base: str, model: str) -> str:
    Person = _people()
    out = (
        _chat_model(base, model, max_tokens=150)
        .with_structured_output(Person)
        .invoke("Describe a person who lives in Rome.")
    )
    expect(isinstance(out, Person), repr(out))
    return repr(out)[:60]


@check("langchain", "with_structured_output function_calling")
def lc_structured_tools(base: str, model: str) -> str:
    City = _city()
    out = (
        _chat_model(base, model, max_tokens=100)
        .with_structured_output(City, method="function_calling")
        .invoke("Name a city in Germany.")
    )
    expect(isinstance(out, City), repr(out))
    return repr(out)


@check("langchain", "with_structured_output json_mode")
def lc_structured_json(base: str, model: str) -> str:
    City = _city()
    out = (
        _chat_model(base, model, max_tokens=100)
        .with_structured_output(City, method="json_mode")
        .invoke("Name a city in Germany as JSON with the keys name and country.")
    )
    expect(isinstance(out, City), repr(out))
    return repr(out)


@check("langchain", "bind_tools (open schema) tool_choice any")
def lc_bind_tools(base: str, model: str) -> str:
    llm = _chat_model(base, model, max_tokens=200).bind_tools([get_weather], tool_choice="any")
    reply = llm.invoke("What is the weather in Paris?")
    expect(reply.tool_calls, f"no call: {reply.content!r}")
    call = reply.tool_calls[0]
    expect(call["name"] == "get_weather" and "city" in call["args"], repr(call))
    return json.dumps(call["args"])


@check("langchain", "bind_tools strict=True")
def lc_bind_strict(base: str, model: str) -> str:
    llm = _chat_model(base, model, max_tokens=200).bind_tools(
        [get_weather], tool_choice="get_weather", strict=True
    )
    reply = llm.invoke("What is the weather in Rome?")
    expect(reply.tool_calls, f"no call: {reply.content!r}")
    return json.dumps(reply.tool_calls[0]["args"])


@check("langchain", "bind_tools auto calls for weather")
def lc_bind_auto(base: str, model: str) -> str:
    reply = (
        _chat_model(base, model, max_tokens=200, temperature=0)
        .bind_tools([get_weather])
        .invoke("What is the weather in Paris?")
    )
    expect(reply.tool_calls, f"answered text: {reply.content!r}")
    return json.dumps(reply.tool_calls[0]["args"])


@check("langchain", "tool loop with ToolMessage")
def lc_tool_loop(base: str, model: str) -> str:
    from langchain_core.messages import HumanMessage, ToolMessage

    llm = _chat_model(base, model, max_tokens=200, temperature=0)
    messages: list[Any] = [HumanMessage("What is the weather in Paris?")]
    first = llm.bind_tools([get_weather], tool_choice="any").invoke(messages)
    call = first.tool_calls[0]
    messages += [first, ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])]
    final = llm.bind_tools([get_weather]).invoke(messages)
    again = [c["args"] for c in final.tool_calls]
    expect(not again, f"the model called get_weather again after its result: {again}")
    expect(isinstance(final.content, str) and final.content.strip(), "no final text")
    return repr(final.content[:50])


@check("langchain", "use_responses_api")
def lc_responses(base: str, model: str) -> str:
    reply = _chat_model(base, model, max_tokens=30, use_responses_api=True).invoke("Say hello.")
    expect(reply.text.strip(), "empty")
    return repr(reply.text[:40])


# ---- instructor -------------------------------------------------------------------------
def _instructor(base: str, mode: str) -> Any:
    import instructor

    return instructor.from_openai(_openai(base), mode=getattr(instructor.Mode, mode))


for _mode in ("TOOLS", "JSON", "JSON_SCHEMA", "MD_JSON"):

    def _make(mode: str) -> None:
        @check("instructor", f"create(response_model) Mode.{mode}")
        def create(base: str, model: str) -> str:
            Person = _people()
            out = _instructor(base, mode).chat.completions.create(
                model=model,
                temperature=0,
                response_model=Person,
                max_tokens=200,
                max_retries=1,
                messages=[{"role": "user", "content": "Describe Anna, 30, from Oslo, Norway."}],
            )
            expect(isinstance(out, Person), repr(out))
            return repr(out)[:60]

    _make(_mode)


@check("instructor", "create_partial (stream)")
def instructor_partial(base: str, model: str) -> str:
    City = _city()
    parts = list(
        _instructor(base, "TOOLS").chat.completions.create_partial(
            model=model,
            temperature=0,
            response_model=City,
            max_tokens=100,
            messages=[{"role": "user", "content": "Name a city in Spain."}],
        )
    )
    expect(parts and parts[-1].name, f"{len(parts)} partials")
    return f"{len(parts)} partials, last {parts[-1]!r}"


@check("instructor", "create_iterable")
def instructor_iterable(base: str, model: str) -> str:
    City = _city()
    cities = list(
        _instructor(base, "TOOLS").chat.completions.create_iterable(
            model=model,
            temperature=0,
            response_model=City,
            max_tokens=200,
            messages=[{"role": "user", "content": "Name two cities in Italy."}],
        )
    )
    expect(cities and all(isinstance(c, City) for c in cities), repr(cities))
    return repr(cities)[:60]


# ---- litellm ----------------------------------------------------------------------------
def _litellm(base: str, model: str, **kw: Any) -> Any:
    import litellm

    kw.setdefault("temperature", 0)
    return litellm.completion(model=f"openai/{model}", api_base=base, api_key="unused", **kw)


@check("litellm", "completion")
def litellm_text(base: str, model: str) -> str:
    reply = _litellm(base, model, messages=HI, max_tokens=30)
    text = reply.choices[0].message.content
    expect(text and text.strip(), "empty")
    return repr(text[:40])


@check("litellm", "completion stream")
def litellm_stream(base: str, model: str) -> str:
    parts = [
        c.choices[0].delta.content or ""
        for c in _litellm(base, model, messages=HI, max_tokens=20, stream=True)
    ]
    expect("".join(parts).strip(), "empty")
    return f"{len(parts)} chunks"


@check("litellm", "tools (open schema) tool_choice required")
def litellm_tools(base: str, model: str) -> str:
    reply = _litellm(
        base, model, messages=ASK_WEATHER, tools=[WEATHER], tool_choice="required", max_tokens=200
    )
    choice = reply.choices[0]
    expect(choice.finish_reason == "tool_calls", f"finish {choice.finish_reason}")
    args = json.loads(choice.message.tool_calls[0].function.arguments)
    expect("city" in args, repr(args))
    return json.dumps(args)


@check("litellm", "tools auto")
def litellm_tools_auto(base: str, model: str) -> str:
    reply = _litellm(
        base, model, messages=ASK_WEATHER, tools=[WEATHER], max_tokens=200, temperature=0
    )
    calls = reply.choices[0].message.tool_calls
    expect(calls, f"answered text: {reply.choices[0].message.content!r}")
    return calls[0].function.arguments


@check("litellm", "response_format pydantic")
def litellm_format(base: str, model: str) -> str:
    City = _city()
    reply = _litellm(
        base,
        model,
        max_tokens=100,
        response_format=City,
        messages=[{"role": "user", "content": "Name a city in Spain."}],
    )
    City.model_validate_json(reply.choices[0].message.content)
    return reply.choices[0].message.content


@check("litellm", "responses()")
def litellm_responses(base: str, model: str) -> str:
    import litellm

    reply = litellm.responses(
        model=f"openai/{model}",
        api_base=base,
        api_key="unused",
        input="Say hello.",
        max_output_tokens=30,
    )
    text = "".join(
        c.text
        for o in reply.output
        if getattr(o, "content", None)
        for c in o.content
        if getattr(c, "text", None)
    )
    expect(text.strip(), "empty")
    return repr(text[:40])


# ---- the llm CLI ------------------------------------------------------------------------
def _llm(base: str, model: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as home:
        (Path(home) / "extra-openai-models.yaml").write_text(
            f"- model_id: chatapp\n  model_name: {model}\n  api_base: {base}\n"
            "  api_key_name: none\n  supports_schema: true\n  supports_tools: true\n"
        )
        (Path(home) / "keys.json").write_text('{"none": "unused"}')
        env = {**os.environ, "LLM_USER_PATH": home}
        exe = str(Path(sys.executable).parent / "llm")
        done = subprocess.run(
            [exe, "-m", "chatapp", "-o", "temperature", "0", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    expect(done.returncode == 0, f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
    return done.stdout


@check("llm", "llm prompt")
def llm_prompt(base: str, model: str) -> str:
    out = _llm(base, model, "-o", "max_tokens", "30", "Say hello.")
    expect(out.strip(), "empty")
    return repr(out.strip()[:40])


@check("llm", "llm --no-stream, system prompt")
def llm_no_stream(base: str, model: str) -> str:
    out = _llm(
        base, model, "--no-stream", "-s", "You are terse.", "-o", "max_tokens", "20", "Say hello."
    )
    expect(out.strip(), "empty")
    return repr(out.strip()[:40])


@check("llm", "llm --schema")
def llm_schema(base: str, model: str) -> str:
    out = _llm(base, model, "--schema", "name, country", "Name a city in France.")
    value = json.loads(out)
    expect({"name", "country"} <= set(value), repr(value))
    return out.strip()


@check("llm", "llm --functions (a tool call and its result)")
def llm_functions(base: str, model: str) -> str:
    code = (
        "def get_weather(city: str) -> str:\n"
        '    "Get the current weather in a city."\n'
        '    return f"18 degrees and sunny in {city}"\n'
    )
    out = _llm(
        base,
        model,
        "--functions",
        code,
        "--td",
        "-o",
        "max_tokens",
        "200",
        "What is the weather in Paris? Use the get_weather tool.",
    )
    expect("get_weather" in out and "18 degrees" in out, f"no tool call: {out.strip()[:100]!r}")
    return out.strip().replace("\n", " ")[:80]
