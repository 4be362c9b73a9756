"""The client checks of scripts/client_checks.py: real clients against a running server.

Each group runs in the interpreter that has its client (the openai SDK in chatapp's .venv;
langchain-openai, instructor and litellm in a separate venv) and prints one JSON line per
check: {"client", "check", "ok", "reason", "seconds"}. Run by client_checks.py as
`python scripts/client_cases.py GROUP BASE_URL MODEL`; it imports only the standard library at
the top, so any interpreter can load it.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

Check = Callable[[str, str], str]  # (base url with /v1, model) -> a note; raises to fail
GROUPS: dict[str, list[tuple[str, Check]]] = {}
WEATHER_PARAMS = {  # an open schema: no additionalProperties (plain dict tools, LangChain)
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "the city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": WEATHER_PARAMS,
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
HI = [{"role": "user", "content": "Say hello in one short sentence."}]


def check(group: str, name: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        GROUPS.setdefault(group, []).append((name, fn))
        return fn

    return register


def expect(condition: object, reason: str) -> None:
    if not condition:
        raise AssertionError(reason)


def _people() -> Any:
    """Pydantic models with a nested one (a $ref in its schema)."""
    from pydantic import BaseModel

    class Address(BaseModel):
        city: str
        country: str

    class Person(BaseModel):
        name: str
        age: int
        address: Address

    return Person


def _city() -> Any:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        country: str

    return City


def _openai(base: str) -> Any:
    import openai

    return openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=300)


def _call_args(call: Any) -> dict[str, Any]:
    args = json.loads(call.function.arguments)
    expect(isinstance(args, dict), f"arguments are not an object: {call.function.arguments!r}")
    return args


# ---- the openai SDK ---------------------------------------------------------------------
@check("openai", "models.list")
def models_list(base: str, model: str) -> str:
    ids = [m.id for m in _openai(base).models.list()]
    expect(model in ids, f"{model} not in {ids}")
    return ", ".join(ids)


@check("openai", "chat create")
def chat_create(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model, temperature=0, messages=HI, max_tokens=40
    )
    text = answer.choices[0].message.content or ""
    expect(text.strip(), "empty answer")
    expect(answer.usage and answer.usage.completion_tokens > 0, "no usage")
    return repr(text[:40])


@check("openai", "chat stream = whole (greedy)")
def chat_stream(base: str, model: str) -> str:
    client = _openai(base)
    kw: dict[str, Any] = {"model": model, "messages": HI, "max_tokens": 30, "temperature": 0}
    whole = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(
        client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    expect(text == whole, f"stream {text!r} != whole {whole!r}")
    expect(chunks[-1].usage is not None, "no usage chunk")
    return f"{len(chunks)} chunks"


@check("openai", "chat.completions.stream helper")
def stream_helper(base: str, model: str) -> str:
    with _openai(base).chat.completions.stream(
        model=model, temperature=0, messages=HI, max_tokens=30
    ) as s:
        deltas = [e for e in s if e.type == "content.delta"]
        final = s.get_final_completion()
    expect(deltas and final.choices[0].message.content, "no content")
    return f"{len(deltas)} deltas"


@check("openai", "completions (legacy), logprobs")
def completions(base: str, model: str) -> str:
    client = _openai(base)
    answer = client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=8, temperature=0, logprobs=2
    )
    lp = answer.choices[0].logprobs
    expect(lp is not None and len(lp.tokens) == 8, "no log-probs")
    chunks = list(
        client.completions.create(
            model=model, prompt="Once upon a time", max_tokens=8, temperature=0, stream=True
        )
    )
    text = "".join(c.choices[0].text for c in chunks)
    expect(text == answer.choices[0].text, f"stream {text!r} != {answer.choices[0].text!r}")
    return repr(text)


@check("openai", "chat logprobs, top_logprobs")
def chat_logprobs(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model, messages=HI, max_tokens=5, temperature=0, logprobs=True, top_logprobs=3
    )
    content = answer.choices[0].logprobs.content
    expect(len(content) == 5 and all(len(t.top_logprobs) == 3 for t in content), "shape")
    expect(all(t.token == t.top_logprobs[0].token for t in content), "greedy != top 1")
    return "5 tokens, 3 alternatives each"


@check("openai", "stop strings, max_tokens")
def stops(base: str, model: str) -> str:
    client = _openai(base)
    cut = client.chat.completions.create(model=model, temperature=0, messages=HI, max_tokens=3)
    expect(cut.choices[0].finish_reason == "length", cut.choices[0].finish_reason)
    whole = (
        client.chat.completions.create(model=model, messages=HI, max_tokens=30, temperature=0)
        .choices[0]
        .message.content
        or ""
    )
    stop = whole.strip().split()[1] if len(whole.split()) > 1 else whole[-1]
    stopped = client.chat.completions.create(
        model=model, messages=HI, max_tokens=30, temperature=0, stop=[stop]
    ).choices[0]
    expect(
        stopped.finish_reason == "stop" and stop not in (stopped.message.content or ""),
        f"stop {stop!r}: {stopped.message.content!r}",
    )
    return f"stopped before {stop!r}"


@check("openai", "seed reproduces a sampled answer")
def seeds(base: str, model: str) -> str:
    client = _openai(base)
    kw: dict[str, Any] = {"model": model, "messages": HI, "max_tokens": 20, "seed": 5}
    first = client.chat.completions.create(**kw, temperature=1).choices[0].message.content
    again = client.chat.completions.create(**kw, temperature=1).choices[0].message.content
    expect(first == again, f"{first!r} != {again!r}")
    return "same text twice"


@check("openai", "n=3 choices")
def choices(base: str, model: str) -> str:
    client = _openai(base)
    answer = client.chat.completions.create(
        model=model, messages=HI, max_tokens=15, n=3, temperature=1, seed=1
    )
    expect([c.index for c in answer.choices] == [0, 1, 2], "indexes")
    texts = {c.message.content for c in answer.choices}
    streamed = list(
        client.chat.completions.create(
            model=model, temperature=0, messages=HI, max_tokens=5, n=2, stream=True
        )
    )
    expect({c.choices[0].index for c in streamed if c.choices} == {0, 1}, "stream indexes")
    return f"{len(texts)} different texts"


@check("openai", "logit_bias bans and forces")
def logit_bias(base: str, model: str) -> str:
    client = _openai(base)
    kw: dict[str, Any] = {"model": model, "messages": HI, "max_tokens": 4, "temperature": 0}
    forced = client.chat.completions.create(**kw, logit_bias={"1000": 100}, logprobs=True)
    tokens = [t.token for t in forced.choices[0].logprobs.content]
    expect(len(tokens) == 4 and len(set(tokens)) == 1, f"+100: {tokens}")
    banned = client.chat.completions.create(**kw, logit_bias={"1000": -100}, logprobs=True)
    others = [t.token for t in banned.choices[0].logprobs.content]
    expect(tokens[0] not in others, f"-100: {tokens[0]!r} came in {others}")
    return f"id 1000 = {tokens[0]!r}: forced x4, then banned"


@check("openai", "any model name")
def any_name(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(model="gpt-4o-mini", messages=HI, max_tokens=3)
    expect(answer.model == model, answer.model)
    return f"answered as {answer.model}"


@check("openai", "a bad request is a BadRequestError")
def bad_request(base: str, model: str) -> str:
    import openai

    try:
        _openai(base).chat.completions.create(model=model, messages=HI, temperature=5)
    except openai.BadRequestError as exc:
        return str(exc.body)[:60] if exc.body else "400"
    raise AssertionError("accepted temperature 5")


@check("openai", ".parse(response_format=model)")
def parse_simple(base: str, model: str) -> str:
    City = _city()
    answer = _openai(base).chat.completions.parse(
        model=model,
        temperature=0,
        messages=[{"role": "user", "content": "Name a city in France."}],
        response_format=City,
        max_tokens=100,
    )
    parsed = answer.choices[0].message.parsed
    expect(isinstance(parsed, City), f"not parsed: {answer.choices[0].message.content!r}")
    return repr(parsed)


@check("openai", ".parse nested model ($defs)")
def parse_nested(base: str, model: str) -> str:
    Person = _people()
    answer = _openai(base).chat.completions.parse(
        model=model,
        temperature=0,
        messages=[{"role": "user", "content": "Describe a person who lives in Rome."}],
        response_format=Person,
        max_tokens=150,
    )
    parsed = answer.choices[0].message.parsed
    expect(isinstance(parsed, Person), f"not parsed: {answer.choices[0].message.content!r}")
    return repr(parsed)[:60]


@check("openai", "json_object")
def json_object(base: str, model: str) -> str:
    answer = _openai(base).chat.completions.create(
        model=model,
        temperature=0,
        messages=[{"role": "user", "content": "Give a JSON object about a cat."}],
        response_format={"type": "json_object"},
        max_tokens=100,
    )
    text, finish = answer.choices[0].message.content or "", answer.choices[0].finish_reason
    expect(finish == "stop", f"finish {finish} after {len(text)} characters: {text[-40:]!r}")
    value = json.loads(text)
    expect(isinstance(value, dict), "not an object")
    return repr(value)[:50]


@check("openai", "stream helper with response_format")
def stream_parse(base: str, model: str) -> str:
    City = _city()
    with _openai(base).chat.completions.stream(
        model=model,
        temperature=0,
        messages=[{"role": "user", "content": "Name a city in Italy."}],
        response_format=City,
        max_tokens=100,
    ) as s:
        for _ in s:
            pass
        final = s.get_final_completion()
    expect(isinstance(final.choices[0].message.parsed, City), "not parsed")
    return repr(final.choices[0].message.parsed)


def run_group(group: str, base: str, model: str) -> None:
    import client_cases_more  # noqa: F401  (register their checks)
    import client_cases_tools  # noqa: F401

    for name, fn in GROUPS[group]:
        started = time.perf_counter()
        try:
            note, ok = fn(base, model), True
        except Exception as exc:
            lines = str(exc).strip().splitlines()
            note, ok = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300], False
            traceback.print_exc(file=sys.stderr)
        seconds = round(time.perf_counter() - started, 1)
        print(
            json.dumps(
                {"client": group, "check": name, "ok": ok, "reason": note, "seconds": seconds}
            ),
            flush=True,
        )


if __name__ == "__main__":
    import client_cases  # this file as a module, so that client_cases_more adds to its GROUPS

    client_cases.run_group(*sys.argv[1:4])
