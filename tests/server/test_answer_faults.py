"""`chatapp serve` and a fault at each stage of an answer: a bug is a 500 with one line (a stream
ends with an error event), an overflowing figure is unknown, and the next request is answered."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from chatapp.engine.engine import Engine
from tests.answer_faults import FAILING_STAGES, inject, message_of
from tests.serving import Served, serving

QUESTION = {"messages": [{"role": "user", "content": "hello"}], "temperature": 0, "max_tokens": 8}


@pytest.fixture(scope="module")
def served(tiny_model_dir: Path) -> Iterator[Served]:
    with serving(Engine(tiny_model_dir, threads=1)) as s:
        yield s


def post(served: Served, **extra: object) -> httpx2.Response:
    return httpx2.post(
        f"{served.api}/chat/completions", json={**QUESTION, **extra}, timeout=60, trust_env=False
    )


@pytest.mark.parametrize("stage", FAILING_STAGES)
def test_a_bug_at_any_stage_is_a_500_of_one_line_and_the_next_request_works(
    served: Served, stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        inject(patch, stage)
        failed = post(served)
    assert failed.status_code == 500, failed.text
    message = failed.json()["error"]["message"]
    assert message_of(stage) in message and "\n" not in message
    after = post(served)
    assert after.status_code == 200 and after.json()["choices"][0]["message"]["content"]


@pytest.mark.parametrize("stage", FAILING_STAGES)
def test_a_bug_at_any_stage_ends_a_stream_with_one_error_event(
    served: Served, stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        inject(patch, stage)
        response = post(served, stream=True)
    data = [
        line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ")
    ]
    errors = [json.loads(d)["error"] for d in data if d != "[DONE]" and "error" in json.loads(d)]
    if response.status_code == 200:  # the stream had started: its last event says why it ended
        assert len(errors) == 1 and message_of(stage) in errors[0]["message"]
    else:
        assert response.status_code == 500 and message_of(stage) in response.text
    assert post(served).status_code == 200


def test_an_overflowing_perplexity_is_unknown_not_a_failure(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as patch:
        inject(patch, "figures overflow")
        response = post(served)
    assert response.status_code == 200, response.text
    figures = response.json()["chatapp"]
    assert figures["perplexity"] is None and figures["prompt_perplexity"] is None
    assert figures["generated_tokens"] > 0


@pytest.mark.parametrize("key", ["1" * 5000, "9" * 13, "-" + "1" * 5000, "٣"])
def test_a_logit_bias_key_that_is_no_token_id_is_a_400(served: Served, key: str) -> None:
    response = post(served, logit_bias={key: 5})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "logit_bias"


@pytest.mark.parametrize("stream", [False, True])
def test_a_bias_that_bans_every_token_a_schema_allows_is_a_400(
    served: Served, stream: bool
) -> None:
    vocab = served.worker.card.vocab_size
    schema = {"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]}
    response = post(
        served,
        stream=stream,
        logit_bias={str(i): -100 for i in range(vocab)},
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    if stream and response.status_code == 200:  # refused at the first step: an error event
        assert "bans every token" in response.text and "logit_bias" in response.text
    else:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert "bans every token" in error["message"] and error["param"] == "logit_bias"
    assert post(served).status_code == 200


@pytest.mark.parametrize("given", [42, True, None, {"role": "user"}, [], 4.5])
def test_a_responses_input_of_the_wrong_kind_says_what_it_takes(
    served: Served, given: object
) -> None:
    response = httpx2.post(
        f"{served.api}/responses",
        json={"input": given, "max_output_tokens": 4},
        timeout=60,
        trust_env=False,
    )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert message.startswith("input must be text or a non-empty list of items")
    assert "\n" not in message


@pytest.mark.parametrize(
    "sent",
    [
        b"Content-Length: 100000\r\n\r\n",  # the headers, then nothing
        b'Content-Length: 100000\r\n\r\n{"messages": [',  # part of the body
        b'Transfer-Encoding: chunked\r\n\r\n10\r\n{"messages": [{\r\n',  # a chunk of many
    ],
    ids=["headers only", "half a body", "chunked"],
)
def test_a_client_that_leaves_mid_body_is_one_log_line_not_a_traceback(
    served: Served, sent: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    with caplog.at_level(logging.WARNING), socket.create_connection((host, int(port))) as sock:
        sock.sendall(head + b"Content-Type: application/json\r\n" + sent)
        time.sleep(0.2)
    deadline = time.monotonic() + 10
    while not any("closed the connection" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.02)
    assert [r for r in caplog.records if r.exc_info] == []  # no traceback
    assert post(served).status_code == 200


ENDLESS_SCHEMAS = {
    "a required property of itself": {
        "type": "object",
        "properties": {"a": {"$ref": "#"}},
        "required": ["a"],
    },
    "a non-empty list of itself": {
        "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}, "minItems": 1}},
        "$ref": "#/$defs/n",
    },
}


@pytest.mark.parametrize("schema", ENDLESS_SCHEMAS.values(), ids=ENDLESS_SCHEMAS.keys())
def test_an_endless_recursive_schema_is_a_400_in_words_not_the_librarys(
    served: Served, schema: dict[str, object]
) -> None:
    response = post(
        served,
        max_tokens=64,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "finite size" in message
    assert "parser error" not in message and "ff_tokens" not in message and "lexeme" not in message
    assert post(served).status_code == 200
