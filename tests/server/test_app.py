"""`chatapp serve` over real HTTP on 127.0.0.1: answers, streams, log-probs, errors."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import httpx2
import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message
from tests.serving import Served

QUESTION = [{"role": "user", "content": "hello"}]


def post(served: Served, path: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(f"{served.api}/{path}", json=body, timeout=60, trust_env=False)


def stream_chunks(served: Served, path: str, body: dict[str, Any]) -> list[Any]:
    """Every `data:` payload of a streamed answer, JSON-decoded ([DONE] kept as a string)."""
    out: list[Any] = []
    with httpx2.stream(
        "POST", f"{served.api}/{path}", json={**body, "stream": True}, timeout=60, trust_env=False
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for event in httpx2.EventSource(response):
            out.append("[DONE]" if event.data == "[DONE]" else json.loads(event.data))
    return out


def reference_answer(engine: Engine, text: str, n: int, mode: str = "iobinding") -> Any:
    gen = engine.chat([Message("user", text)], replace(GREEDY, max_new_tokens=n), mode)
    gen.run()
    return gen


def test_models_lists_the_served_model(served: Served) -> None:
    response = httpx2.get(f"{served.api}/models", trust_env=False)
    assert response.status_code == 200
    (entry,) = response.json()["data"]
    assert entry["id"] == served.worker.card.id == "varied-llama"
    assert entry["object"] == "model" and entry["owned_by"] == "chatapp"
    assert entry["max_model_len"] == 512
    assert entry["chatapp"]["device"] == "cpu" and entry["chatapp"]["default_loop"] == "iobinding"
    assert entry["chatapp"]["parallel"] == 1  # requests decoded together (--parallel)
    # The engine's card: what it is and which figures each answer reports.
    card = entry["chatapp"]["card"]
    assert card["runs_on"] == "this machine" and card["max_context"] == 512
    assert card["facts"]["Device"] == entry["chatapp"]["device_label"]
    assert card["facts"]["Loop"] == "IO-Binding"
    measures = card["measures"]
    assert {"ttft", "tokens_per_second", "perplexity", "transfer"} <= set(measures)
    assert all(m == {"reported": True} for m in measures.values())
    one = httpx2.get(f"{served.api}/models/varied-llama", trust_env=False)
    assert one.json()["id"] == "varied-llama"


@pytest.mark.parametrize("loop", ["nocache", "naive", "iobinding"])
def test_chat_answer_equals_the_engine_and_carries_the_figures(
    served: Served, reference: Engine, loop: str
) -> None:
    body = {"model": "varied-llama", "messages": QUESTION, "temperature": 0, "max_tokens": 12}
    data = post(served, "chat/completions", {**body, "chatapp": {"loop": loop}}).json()
    expected = reference_answer(reference, "hello", 12, loop)
    (choice,) = data["choices"]
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    assert choice["message"] == {"role": "assistant", "content": expected.text}
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None
    assert data["usage"] == {
        "prompt_tokens": expected.stats.prompt_tokens,
        "completion_tokens": 12,
        "total_tokens": expected.stats.prompt_tokens + 12,
    }
    figures = data["chatapp"]
    assert figures["loop"] == loop and figures["device"] == "cpu"
    assert figures["generated_tokens"] == 12 and figures["engine_finish_reason"] == "length"
    assert figures["tokens_per_s"] > 0 and figures["ttft_s"] > 0
    assert figures["h2d_bytes_per_token"] == 0 and figures["d2h_bytes_per_token"] == 0  # CPU
    assert figures["perplexity"] == pytest.approx(expected.stats.perplexity, rel=1e-4)


def test_stream_gives_the_same_answer_chunk_by_chunk(served: Served) -> None:
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 12}
    whole = post(served, "chat/completions", body).json()
    chunks = stream_chunks(
        served, "chat/completions", {**body, "stream_options": {"include_usage": True}}
    )
    assert chunks[-1] == "[DONE]"
    first, *middle, last, usage, _ = chunks
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == first["id"] for c in middle)
    text = "".join(c["choices"][0]["delta"]["content"] for c in middle)
    assert text == whole["choices"][0]["message"]["content"]
    assert all(c["choices"][0]["finish_reason"] is None for c in middle)
    assert last["choices"][0]["finish_reason"] == "length" and last["choices"][0]["delta"] == {}
    assert last["chatapp"]["generated_tokens"] == 12  # the figures ride on the last chunk
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]


def test_logprobs_and_top_logprobs_match_the_engine(served: Served, reference: Engine) -> None:
    body = {
        "messages": QUESTION,
        "temperature": 0,
        "max_tokens": 8,
        "logprobs": True,
        "top_logprobs": 3,
    }
    data = post(served, "chat/completions", body).json()
    expected = reference_answer(reference, "hello", 8)
    entries = data["choices"][0]["logprobs"]["content"]
    assert len(entries) == 8
    assert [e["logprob"] for e in entries] == pytest.approx(expected.stats.logprobs, abs=1e-5)
    raw = b"".join(bytes(e["bytes"]) for e in entries)
    # The tokens' exact bytes make up the answer, even where one token holds half a character.
    assert raw.decode("utf-8", errors="replace") == expected.text
    for entry in entries:
        top = entry["top_logprobs"]
        assert len(top) == 3 and top[0]["token"] == entry["token"]  # greedy took the best
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        assert top[0]["logprob"] == pytest.approx(entry["logprob"], abs=1e-5)
    streamed = stream_chunks(served, "chat/completions", body)
    tokens = [
        e for c in streamed[1:-2] for e in (c["choices"][0]["logprobs"] or {}).get("content", [])
    ]
    assert [e["logprob"] for e in tokens] == pytest.approx([e["logprob"] for e in entries])


def test_completions_continue_raw_text_with_legacy_logprobs(
    served: Served, reference: Engine
) -> None:
    body = {"prompt": "the", "temperature": 0, "max_tokens": 6, "logprobs": 2}
    data = post(served, "completions", body).json()
    ids = reference.tokenizer.encode("the")
    gen = reference.generate_ids(ids, replace(GREEDY, max_new_tokens=6))
    gen.run()
    (choice,) = data["choices"]
    assert data["object"] == "text_completion" and choice["text"] == gen.text
    logprobs = choice["logprobs"]
    assert logprobs["token_logprobs"] == pytest.approx(gen.stats.logprobs, abs=1e-5)
    assert len(logprobs["tokens"]) == len(logprobs["text_offset"]) == 6
    assert all(len(top) == 2 for top in logprobs["top_logprobs"])
    assert data["usage"]["prompt_tokens"] == len(ids)
    chunks = stream_chunks(served, "completions", body)
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == gen.text


def test_default_max_tokens_of_completions_is_openais_16(served: Served) -> None:
    data = post(served, "completions", {"prompt": "a b c", "temperature": 0}).json()
    assert data["usage"]["completion_tokens"] <= 16
    if data["choices"][0]["finish_reason"] == "length":
        assert data["usage"]["completion_tokens"] == 16


def test_stop_string_ends_the_answer_before_it(served: Served, reference: Engine) -> None:
    full = reference_answer(reference, "hello", 30).text
    # A stop string that first appears a few characters in (the text is random bytes).
    at = next(
        k
        for k in range(3, len(full) - 2)
        if full.find(full[k : k + 2]) == k and "\ufffd" not in full[k : k + 2]
    )
    stop = full[at : at + 2]
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 30, "stop": [stop, "\x00never"]}
    data = post(served, "chat/completions", body).json()
    assert data["choices"][0]["message"]["content"] == full[:at]
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["chatapp"]["engine_finish_reason"] == "stop"  # the engine stopped there too
    chunks = stream_chunks(served, "chat/completions", body)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == full[:at]


def test_seeded_sampling_is_reproducible(served: Served) -> None:
    body = {"messages": QUESTION, "temperature": 1.0, "top_k": 20, "seed": 7, "max_tokens": 10}
    first = post(served, "chat/completions", body).json()["choices"][0]["message"]["content"]
    again = post(served, "chat/completions", body).json()["choices"][0]["message"]["content"]
    assert first == again


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": "hi"}, "messages", "non-empty list"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]", "tool_call_id"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].role", "must be"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0]", "string or a list"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content",
            "only text parts",
        ),
        ({"messages": QUESTION, "temperature": 3}, "temperature", "from 0 to 2"),
        ({"messages": QUESTION, "temperature": "hot"}, "temperature", "must be a number"),
        ({"messages": QUESTION, "top_p": 0}, "top_p", "above 0"),
        ({"messages": QUESTION, "max_tokens": 0}, "max_tokens", "whole number"),
        ({"messages": QUESTION, "max_tokens": 2.5}, "max_tokens", "whole number"),
        ({"messages": QUESTION, "n": 9}, "n", "from 1 to 8"),
        ({"messages": QUESTION, "logit_bias": {"x": 1}}, "logit_bias", "not a token id"),
        ({"messages": QUESTION, "logit_bias": {"1": 101}}, "logit_bias", "from -100"),
        ({"messages": QUESTION, "seed": -1}, "seed", "whole number"),
        ({"messages": QUESTION, "stop": ["a"] * 5}, "stop", "at most 4"),
        ({"messages": QUESTION, "stop": [""]}, "stop", "1 to 200"),
        ({"messages": QUESTION, "top_logprobs": 2}, "top_logprobs", "needs logprobs"),
        ({"messages": QUESTION, "logprobs": "yes"}, "logprobs", "true or false"),
        ({"messages": QUESTION, "presence_penalty": 0.5}, "presence_penalty", "not supported"),
        (
            {"messages": QUESTION, "tools": [{"type": "function"}]},
            "tools[0].function",
            "must be an object",
        ),
        (
            {"messages": QUESTION, "stream_options": {"include_usage": True}},
            "stream_options",
            "only",
        ),
        ({"messages": QUESTION, "chatapp": {"loop": "fast"}}, "chatapp.loop", "one of nocache"),
    ],
)
def test_bad_chat_requests_get_a_400_naming_the_field(
    served: Served, body: dict[str, Any], param: str, words: str
) -> None:
    response = post(served, "chat/completions", body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert words in error["message"] and "\n" not in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": ""}, "prompt"),
        ({"prompt": [1, 2, 3]}, "prompt"),
        ({"prompt": "x", "logprobs": 6}, "logprobs"),
        ({"prompt": "x", "echo": True}, "echo"),
        ({"prompt": "x", "suffix": "y"}, "suffix"),
    ],
)
def test_bad_completion_requests_get_a_400(
    served: Served, body: dict[str, Any], param: str
) -> None:
    response = post(served, "completions", body)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_malformed_bodies_and_unknown_places_get_json_errors(served: Served) -> None:
    bad_json = httpx2.post(
        f"{served.api}/chat/completions", content=b"{nope", timeout=30, trust_env=False
    )
    assert bad_json.status_code == 400
    assert "not valid JSON" in bad_json.json()["error"]["message"]
    not_object = httpx2.post(
        f"{served.api}/chat/completions", content=b"[1]", timeout=30, trust_env=False
    )
    assert not_object.status_code == 400 and "JSON object" in not_object.json()["error"]["message"]
    huge = httpx2.post(
        f"{served.api}/chat/completions", content=b" " * (9 * 2**20), timeout=30, trust_env=False
    )
    assert huge.status_code == 413
    missing = httpx2.get(f"{served.api}/embeddings", trust_env=False)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    wrong_method = httpx2.get(f"{served.api}/chat/completions", trust_env=False)
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()
    deep = httpx2.post(
        f"{served.api}/chat/completions", content=b"[" * 100_000, timeout=30, trust_env=False
    )
    assert deep.status_code == 400 and "too deeply" in deep.json()["error"]["message"]
    other_model = httpx2.get(f"{served.api}/models/gpt-4", trust_env=False)
    assert other_model.status_code == 404
    assert other_model.json()["error"]["code"] == "model_not_found"


def test_any_model_name_is_answered_by_the_served_model(served: Served) -> None:
    # LangChain's and llama.cpp's tests' default: one model served answers every name.
    body = {"model": "gpt-3.5-turbo", "messages": QUESTION, "max_tokens": 2}
    answer = post(served, "chat/completions", body)
    assert answer.status_code == 200 and answer.json()["model"] == served.worker.card.id
    text = post(served, "completions", {"model": "x", "prompt": "a", "max_tokens": 2})
    assert text.status_code == 200 and text.json()["model"] == served.worker.card.id


def test_a_prompt_longer_than_the_context_is_a_400_even_when_streamed(served: Served) -> None:
    long = [{"role": "user", "content": "a " * 2000}]
    for stream in (False, True):
        response = post(served, "chat/completions", {"messages": long, "stream": stream})
        assert response.status_code == 400
        error = response.json()["error"]
        assert (
            error["code"] == "context_length_exceeded" and "context holds 512" in error["message"]
        )


def test_figures_are_finite_json_numbers(served: Served) -> None:
    data = post(served, "chat/completions", {"messages": QUESTION, "max_tokens": 3}).json()
    for key, value in data["chatapp"].items():
        if isinstance(value, float):
            assert math.isfinite(value), key


def test_logit_bias_bans_and_forces_tokens(served: Served, reference: Engine) -> None:
    solo = reference_answer(reference, "hello", 6)
    first = solo.stats.token_ids[0]
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 6}
    banned = post(served, "chat/completions", {**body, "logit_bias": {str(first): -100}}).json()
    settings = replace(GREEDY, max_new_tokens=6, logit_bias=((first, -100.0),))
    expected = reference.chat([Message("user", "hello")], settings)
    expected.run()
    assert first not in expected.stats.token_ids  # reference computed here, with the ban
    assert banned["choices"][0]["message"]["content"] == expected.text != solo.text
    forced = post(
        served,
        "chat/completions",
        {**body, "logit_bias": {str(first): 100}, "logprobs": True, "max_tokens": 4},
    ).json()["choices"][0]
    tokens = [entry["token"] for entry in forced["logprobs"]["content"]]
    assert len(tokens) == 4 and set(tokens) == {forced["logprobs"]["content"][0]["token"]}
    completion = post(
        served,
        "completions",
        {
            "prompt": "in the",
            "max_tokens": 3,
            "temperature": 0.9,
            "logit_bias": {str(first): 100},
            "logprobs": 0,
        },
    ).json()["choices"][0]
    assert len(set(completion["logprobs"]["tokens"])) == 1  # sampled, yet forced


def test_the_default_model_obeys_logit_bias(default_served: Served) -> None:
    """Real tokens of SmolLM2-135M: banning its greedy first token changes the answer;
    +100 on " Paris" makes every token " Paris"."""
    tokenizer = default_served.worker.engine.tokenizer
    ask = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
    body = {**ask, "temperature": 0, "max_tokens": 8, "logprobs": True}
    plain = post(default_served, "chat/completions", body).json()["choices"][0]
    first = plain["logprobs"]["content"][0]["token"]
    (first_id,) = tokenizer.encode_text(first)
    banned = post(
        default_served, "chat/completions", {**body, "logit_bias": {str(first_id): -100}}
    ).json()["choices"][0]
    assert banned["logprobs"]["content"][0]["token"] != first
    assert banned["message"]["content"] != plain["message"]["content"]
    (paris,) = tokenizer.encode_text(" Paris")
    forced = post(
        default_served,
        "chat/completions",
        {**body, "max_tokens": 3, "logit_bias": {str(paris): 100}},
    ).json()["choices"][0]
    assert forced["message"]["content"] == " Paris" * 3
