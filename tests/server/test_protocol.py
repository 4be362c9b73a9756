"""OpenAI-protocol checks, in the manner of llama.cpp's own server tests (our own port, not
their code): shapes, streaming, usage, stop strings, finish_reason, log-probs and invalid
requests, against a real `chatapp serve` process (the varied tiny model: seconds) and, where
it is installed, llama.cpp's server (CHATAPP_LLAMACPP_PYTHON, see tests/remote/
test_engine_servers.py; skipped otherwise). The checks hold for any model: they compare the
server with itself (a stream with the whole answer, a stop string with the answer without it),
never with an expected text. Structured output and tools are checked elsewhere.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.remote.test_engine_servers import free_port, llamacpp_command, running_server

openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")

HELLO = [{"role": "user", "content": "Tell me about the sea."}]


@dataclass
class Target:
    name: str  # chatapp | llamacpp
    url: str  # http://127.0.0.1:PORT

    @property
    def api(self) -> str:
        return self.url + "/v1"

    @property
    def strict(self) -> bool:
        """chatapp refuses what it cannot honour; llama.cpp's server ignores some of it."""
        return self.name == "chatapp"

    def post(self, path: str, body: Any, **kw: Any) -> httpx2.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx2.post(
            f"{self.api}/{path}",
            content=content,
            headers={"Content-Type": "application/json"},
            timeout=120,
            trust_env=False,
            **kw,
        )

    def chat(self, **fields: Any) -> dict[str, Any]:
        response = self.post("chat/completions", {"messages": HELLO, **fields})
        assert response.status_code == 200, response.text
        return response.json()  # type: ignore[no-any-return]

    def stream(self, path: str, **fields: Any) -> list[Any]:
        """Every `data:` payload, JSON-decoded, "[DONE]" kept as a string."""
        body = {"stream": True, **fields}
        if path == "chat/completions":
            body.setdefault("messages", HELLO)
        out: list[Any] = []
        with httpx2.stream(
            "POST", f"{self.api}/{path}", json=body, timeout=120, trust_env=False
        ) as response:
            assert response.status_code == 200, response.read()
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    data = line.removeprefix("data: ")
                    out.append(data if data == "[DONE]" else json.loads(data))
        return out


@pytest.fixture(scope="module", params=["chatapp", "llamacpp"])
def target(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Target]:
    port = free_port()
    if request.param == "llamacpp":
        command = llamacpp_command(port)
    else:
        model: Path = request.getfixturevalue("varied_model_dir")
        command = [
            *(sys.executable, "-m", "chatapp", "serve", "--model", str(model), "--quiet"),
            *("--port", str(port), "--threads", "1", "--mode", "naive"),
        ]
    with running_server(command, port) as url:
        yield Target(request.param, url)


# ---- shapes ------------------------------------------------------------------------------
def test_models_lists_a_model(target: Target) -> None:
    data = httpx2.get(f"{target.api}/models", trust_env=False).json()
    assert data["object"] == "list" and data["data"]
    assert all(isinstance(m["id"], str) and m["object"] == "model" for m in data["data"])


def test_a_whole_chat_answer_has_openais_shape(target: Target) -> None:
    answer = target.chat(max_tokens=8, temperature=0)
    assert answer["object"] == "chat.completion" and answer["id"]
    assert isinstance(answer["created"], int) and isinstance(answer["model"], str)
    (choice,) = answer["choices"]
    assert choice["index"] == 0 and choice["message"]["role"] == "assistant"
    assert isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    usage = answer["usage"]
    assert usage["prompt_tokens"] > 0 and 0 < usage["completion_tokens"] <= 8
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_max_tokens_ends_with_length(target: Target) -> None:
    for n in (1, 5):
        answer = target.chat(max_tokens=n, temperature=0)
        reason, used = answer["choices"][0]["finish_reason"], answer["usage"]["completion_tokens"]
        assert (reason, used) == ("length", n) or (reason == "stop" and used < n), answer


def test_any_model_name_is_answered(target: Target) -> None:
    answer = target.chat(model="gpt-3.5-turbo", max_tokens=2)
    assert answer["choices"][0]["message"]["content"] is not None


def test_the_same_seed_gives_the_same_answer(target: Target) -> None:
    fields = {"max_tokens": 12, "temperature": 0.9, "seed": 42}
    first = target.chat(**fields)["choices"][0]["message"]["content"]
    assert target.chat(**fields)["choices"][0]["message"]["content"] == first


# ---- streaming ---------------------------------------------------------------------------
def test_a_stream_says_what_the_whole_answer_says(target: Target) -> None:
    whole = target.chat(max_tokens=12, temperature=0)
    chunks = target.stream("chat/completions", max_tokens=12, temperature=0)
    assert chunks[-1] == "[DONE]"
    objects = chunks[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in objects)
    assert len({c["id"] for c in objects}) == 1  # one id for the whole stream
    deltas = [c["choices"][0]["delta"] for c in objects if c["choices"]]
    assert deltas[0].get("role") == "assistant"
    text = "".join(d.get("content") or "" for d in deltas)
    assert text == whole["choices"][0]["message"]["content"]
    finals = [c for c in objects if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "length"


def test_a_stream_with_include_usage_ends_with_a_usage_chunk(target: Target) -> None:
    chunks = target.stream("chat/completions", max_tokens=6, stream_options={"include_usage": True})
    usage_chunk = chunks[-2]
    if not target.strict and "usage" not in usage_chunk:
        pytest.skip("llama-cpp-python's server sends no usage in streams")
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 6
    assert all(c.get("usage") is None for c in chunks[:-2])  # only the last one carries it


def test_the_openai_sdk_streams(target: Target) -> None:
    with openai.OpenAI(base_url=target.api, api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="anything", messages=HELLO, max_tokens=5, temperature=0, stream=True
        )
        parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
        whole = client.chat.completions.create(
            model="anything", messages=HELLO, max_tokens=5, temperature=0
        )
    assert "".join(parts) == whole.choices[0].message.content


# ---- stop strings ------------------------------------------------------------------------
def test_a_stop_string_ends_the_answer_before_it(target: Target) -> None:
    free = target.chat(max_tokens=16, temperature=0)["choices"][0]["message"]["content"]
    stop = next((free[i : i + 2] for i in range(3, len(free) - 2) if free[i : i + 2].strip()), "")
    if not stop:
        pytest.skip(f"the greedy answer is too short to cut: {free!r}")
    for stream in (False, True):
        if stream:
            chunks = target.stream("chat/completions", max_tokens=16, temperature=0, stop=[stop])
            objects = [c for c in chunks[:-1] if c["choices"]]
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in objects)
            reason = objects[-1]["choices"][0]["finish_reason"]
        else:
            answer = target.chat(max_tokens=16, temperature=0, stop=[stop])
            text = answer["choices"][0]["message"]["content"]
            reason = answer["choices"][0]["finish_reason"]
        assert text == free[: free.index(stop)] and reason == "stop", (stream, stop, text)


# ---- log-probs ---------------------------------------------------------------------------
def test_logprobs_of_a_whole_answer(target: Target) -> None:
    answer = target.chat(max_tokens=6, temperature=0, logprobs=True, top_logprobs=3)
    entries = answer["choices"][0]["logprobs"]["content"]
    assert len(entries) == answer["usage"]["completion_tokens"]
    if target.strict:  # chatapp's token bytes are the answer's text, byte for byte
        raw = b"".join(bytes(e["bytes"]) for e in entries)
        assert raw.decode("utf-8", "replace") == answer["choices"][0]["message"]["content"]
    for entry in entries:
        assert entry["logprob"] <= 0 and math.isfinite(entry["logprob"])
        assert isinstance(entry["bytes"], list) or (not target.strict and entry["bytes"] is None)
        top = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(top) == 3 and top == sorted(top, reverse=True)
        assert math.isclose(entry["logprob"], top[0], abs_tol=1e-4)  # greedy: the likeliest


def test_logprobs_in_a_stream(target: Target) -> None:
    chunks = target.stream("chat/completions", max_tokens=5, temperature=0, logprobs=True)
    # A token holding half a character comes with its log-prob and no text yet.
    choices = [c["choices"][0] for c in chunks[:-1] if c["choices"]]
    entries = [e for c in choices for e in (c.get("logprobs") or {}).get("content") or []]
    if not target.strict and not entries:
        pytest.skip("llama-cpp-python's server sends no log-probs in streams")
    assert len(entries) == 5 and all(e["logprob"] <= 0 for e in entries)


# ---- the legacy completions endpoint -----------------------------------------------------
def test_completions_whole_and_streamed(target: Target) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 6, "temperature": 0}
    whole = target.post("completions", body).json()
    assert whole["object"] == "text_completion"
    (choice,) = whole["choices"]
    assert isinstance(choice["text"], str) and choice["finish_reason"] == "length"
    assert whole["usage"]["completion_tokens"] == 6
    chunks = target.stream("completions", **body)
    assert chunks[-1] == "[DONE]"
    text = "".join(c["choices"][0]["text"] for c in chunks[:-1] if c["choices"])
    assert text == choice["text"]


def test_completions_legacy_logprobs(target: Target) -> None:
    body = {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0, "logprobs": 2}
    logprobs = target.post("completions", body).json()["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == len(logprobs["token_logprobs"]) == 4
    assert all(len(top) == 2 for top in logprobs["top_logprobs"])
    assert all(lp <= 0 for lp in logprobs["token_logprobs"])


# ---- invalid requests --------------------------------------------------------------------
INVALID: dict[str, tuple[Any, bool]] = {  # body, refused by llama.cpp's server too
    "not JSON": (b"{nope", True),
    "no messages": ({"max_tokens": 2}, True),
    "messages a string": ({"messages": "hi"}, True),
    "a message without role": ({"messages": [{"content": "hi"}]}, True),
    "an unknown role": ({"messages": [{"role": "wizard", "content": "hi"}]}, False),
    "temperature as text": ({"messages": HELLO, "temperature": "hot"}, True),
    "negative max_tokens": ({"messages": HELLO, "max_tokens": -1}, False),
    "n of 9": ({"messages": HELLO, "n": 9}, False),
    "a deep body": (b"[" * 100_000, False),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_an_invalid_chat_request_is_a_client_error(target: Target, case: str) -> None:
    body, everywhere = INVALID[case]
    if not target.strict and not everywhere:
        # llama-cpp-python's server accepts these: -1 tokens runs to the end of its context,
        # and it was still busy with 100 000 `[` after 120 s.
        pytest.skip("llama.cpp's server accepts or answers this otherwise")
    response = target.post("chat/completions", body)
    allowed = (400,) if target.strict else (400, 422)  # FastAPI's validation error is 422
    if not target.strict and response.status_code not in allowed:
        # Seen with llama-cpp-python 0.3.36: 500 for invalid JSON and failed validation, 200
        # for a body without messages. Recorded, not ours to fix.
        pytest.xfail(f"llama.cpp's server answers {response.status_code}")
    assert response.status_code in allowed, response.text
    if target.strict:
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"]


def test_a_prompt_longer_than_the_context_is_a_400(target: Target) -> None:
    if not target.strict:
        pytest.skip("llama-cpp-python's server was still busy with it after 120 s")
    response = target.post(
        "chat/completions", {"messages": [{"role": "user", "content": "sea " * 20_000}]}
    )
    assert response.status_code == 400, response.text[:300]


def test_unknown_routes_and_methods(target: Target) -> None:
    assert httpx2.get(f"{target.api}/nothing-here", trust_env=False).status_code == 404
    wrong = httpx2.get(f"{target.api}/chat/completions", trust_env=False).status_code
    assert wrong in (404, 405)
