"""response_format against a real `chatapp serve`, through the openai SDK: what comes back
must parse and validate against the schema, on both loops, streamed or not.

The tiny model has random weights: without the constraint its answers are byte soup, so any
valid JSON here is the grammar's doing. Fields are bounded (enums, ranges, maxLength) so the
answer ends well inside max_tokens whatever the model prefers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from chatapp.engine.engine import Engine
from chatapp.server import structured_fields
from tests.hostile_schemas import REFUSED_BY_CHECK, REFUSED_BY_LIBRARY, ref_chain
from tests.serving import Served, serving

openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")
pytest.importorskip("llguidance", reason="structured output needs llguidance")

ASK = [{"role": "user", "content": "Describe a pet as JSON."}]
LOOPS = ["naive", "iobinding"]


class Pet(BaseModel):
    kind: Literal["cat", "dog", "fish"]
    name: str = Field(max_length=8)
    age: int = Field(ge=0, le=30)
    friendly: bool


PET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "colour": {"enum": ["red", "green", "blue"]},
        "sizes": {"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 9}},
        "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 5}]},
    },
    "required": ["colour", "sizes", "note"],
    "additionalProperties": False,
}


def assert_pet_schema(value: Any) -> None:
    assert set(value) == {"colour", "sizes", "note"}
    assert value["colour"] in ("red", "green", "blue")
    assert all(isinstance(s, int) and 1 <= s <= 9 for s in value["sizes"])
    assert value["note"] is None or (isinstance(value["note"], str) and len(value["note"]) <= 5)


@pytest.mark.parametrize("loop", LOOPS)
def test_sdk_parse_returns_the_pydantic_model(client: openai.OpenAI, model: str, loop: str) -> None:
    for seed in (1, 2):
        completion = client.beta.chat.completions.parse(
            model=model,
            messages=ASK,
            response_format=Pet,
            temperature=1.0,
            seed=seed,
            max_tokens=300,
            extra_body={"chatapp": {"loop": loop}},
        )
        message = completion.choices[0].message
        assert isinstance(message.parsed, Pet)
        assert completion.choices[0].finish_reason == "stop"
        assert Pet.model_validate_json(message.content or "") == message.parsed


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_answers_validate(
    client: openai.OpenAI, model: str, loop: str, stream: bool
) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET_SCHEMA}}
    args: dict[str, Any] = {
        "model": model,
        "messages": ASK,
        "response_format": fmt,
        "temperature": 1.0,
        "seed": 5,
        "max_tokens": 300,
        "extra_body": {"chatapp": {"loop": loop}},
    }
    if stream:
        chunks = list(client.chat.completions.create(stream=True, **args))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        text = client.chat.completions.create(**args).choices[0].message.content or ""
    assert_pet_schema(json.loads(text))


@pytest.mark.parametrize("loop", LOOPS)
def test_json_object_answers_are_objects(client: openai.OpenAI, model: str, loop: str) -> None:
    answer = client.chat.completions.create(
        model=model,
        messages=ASK,
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=400,
        extra_body={"chatapp": {"loop": loop}},
    )
    choice = answer.choices[0]
    if choice.finish_reason == "stop":  # a random model may nest until max_tokens
        assert isinstance(json.loads(choice.message.content or ""), dict)
    else:
        assert (choice.message.content or "").startswith("{")


def test_both_loops_give_the_same_constrained_answer(client: openai.OpenAI, model: str) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "pet", "schema": PET_SCHEMA}}
    texts = {
        client.chat.completions.create(
            model=model,
            messages=ASK,
            response_format=fmt,  # type: ignore[arg-type]
            temperature=0,
            max_tokens=300,
            extra_body={"chatapp": {"loop": loop}},
        )
        .choices[0]
        .message.content
        for loop in LOOPS
    }
    assert len(texts) == 1


@pytest.mark.parametrize(
    ("fmt", "param", "words"),
    [
        ({"type": "grammar"}, "response_format.type", "json_schema"),
        ({"type": "json_schema"}, "response_format.json_schema", "name and schema"),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": []}},
            "response_format.json_schema.schema",
            "JSON object",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objectx"}}},
            "response_format",
            "objectx",
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nope"}}},
            "response_format.json_schema.schema",
            "nope",
        ),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_formats_get_a_one_line_400(
    served: Served, fmt: dict[str, Any], param: str, words: str, stream: bool
) -> None:
    import httpx2

    body = {"messages": ASK, "response_format": fmt, "stream": stream}
    response = httpx2.post(f"{served.api}/chat/completions", json=body, timeout=60, trust_env=False)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"]
    assert "\n" not in error["message"]


def test_without_the_library_the_request_is_refused(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx2

    monkeypatch.setattr(structured_fields, "library_available", lambda: False)
    body = {"messages": ASK, "response_format": {"type": "json_object"}}
    response = httpx2.post(f"{served.api}/chat/completions", json=body, timeout=60, trust_env=False)
    assert response.status_code == 400
    assert "llguidance" in response.json()["error"]["message"]
    plain = httpx2.post(
        f"{served.api}/chat/completions",
        json={"messages": ASK, "max_tokens": 3},
        timeout=60,
        trust_env=False,
    )
    assert plain.status_code == 200  # everything else still works


def test_the_default_model_answers_a_pydantic_model(default_model_dir: Path) -> None:
    class City(BaseModel):
        name: str = Field(max_length=30)
        country: str = Field(max_length=30)
        is_capital: bool  # (a number lets a 135M model write digits until max_tokens)

    with (
        serving(Engine(default_model_dir, threads=1)) as served,
        openai.OpenAI(base_url=served.api, api_key="unused", max_retries=0) as client,
    ):
        completion = client.beta.chat.completions.parse(
            model=served.worker.card.id,
            messages=[{"role": "user", "content": "Give the capital of France as JSON."}],
            response_format=City,
            temperature=0,
            max_tokens=100,
        )
    city = completion.choices[0].message.parsed
    assert isinstance(city, City) and city.name


def sendable(corpus: dict[str, tuple[Any, str]]) -> list[str]:
    """The corpus's schemas that JSON can carry (not Python sets, number keys, or nesting past
    the client's own encoder)."""
    out = []
    for name, (schema, _) in corpus.items():
        if "from Python" in name:  # JSON has no sets; its keys are always text
            continue
        try:
            json.dumps(schema)
        except (TypeError, ValueError, RecursionError):
            continue
        out.append(name)
    return out


HOSTILE = {**REFUSED_BY_CHECK, **REFUSED_BY_LIBRARY}


@pytest.mark.parametrize("name", sendable(HOSTILE))
@pytest.mark.parametrize("where", ["response_format", "tools"])
def test_hostile_schemas_get_a_one_line_400_and_the_server_goes_on(
    served: Served, name: str, where: str
) -> None:
    import httpx2

    schema, _ = HOSTILE[name]
    body: dict[str, Any] = {"messages": ASK, "max_tokens": 3}
    if where == "tools":
        function = {"name": "f", "parameters": schema}  # not an object: a 400 of its own
        body.update(tools=[{"type": "function", "function": function}], tool_choice="required")
    else:
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": schema},
        }
    url = f"{served.api}/chat/completions"
    raw = json.dumps(body).encode()  # as Python writes it: 1e999 as Infinity, NaN as NaN
    headers = {"Content-Type": "application/json"}
    response = httpx2.post(url, content=raw, headers=headers, timeout=60, trust_env=False)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "\n" not in message and "Traceback" not in message
    ok = httpx2.post(url, json={"messages": ASK, "max_tokens": 2}, timeout=60, trust_env=False)
    assert ok.status_code == 200


def test_a_ref_chain_leaves_a_serve_process_alive(tiny_model_dir: Path) -> None:
    """The request that killed `chatapp serve` (SIGSEGV), sent to a real process: a crash
    fails this test instead of ending pytest."""
    import httpx2

    command = ["serve", "--model", str(tiny_model_dir), "--threads", "1", "--port", "0", "--json"]
    process = subprocess.Popen(
        [sys.executable, "-m", "chatapp", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = json.loads(process.stdout.readline())["url"]
        fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": ref_chain(3000)}}
        for _ in range(100):  # until it listens
            try:
                response = httpx2.post(
                    f"{url}/chat/completions",
                    json={"messages": ASK, "response_format": fmt},
                    timeout=60,
                    trust_env=False,
                )
                break
            except httpx2.ConnectError:
                time.sleep(0.1)
        else:
            pytest.fail("chatapp serve never listened")
        assert response.status_code == 400 and "definitions" in response.json()["error"]["message"]
        hi = {"messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 2}
        again = httpx2.post(f"{url}/chat/completions", json=hi, timeout=60, trust_env=False)
        assert again.status_code == 200 and process.poll() is None
    finally:
        process.terminate()
        process.communicate(timeout=30)
