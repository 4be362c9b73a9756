"""The remote backend against a hostile server (tests/remote/fake_server.py): every case ends
in bounded time and memory with one line, never an exception the window does not expect."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace

import pytest

from chatapp.engine.sampling import GREEDY, SamplingSettings
from chatapp.engine.text.chat import Message
from chatapp.remote.client import MAX_STREAM_BYTES, RemoteClient
from chatapp.remote.engine import MAX_ANSWER_CHARS, MAX_IDLE_CHUNKS, RemoteEngine
from chatapp.remote.errors import RemoteError, RemoteHTTPError, RemoteStreamError
from tests.remote.fake_server import (
    END,
    Action,
    FakeServer,
    Request,
    delta,
    endless_bytes,
    endless_tokens,
    event,
    hostile,
    html_page,
    json_response,
    models_listing,
    stream_head,
)

HELLO = [Message("user", "hi")]


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for server in started:
        server.close()


def engine_for(
    fakes: list[FakeServer], answer: Iterable[Action] | None = None, **kw
) -> RemoteEngine:
    script = hostile(lambda _request: answer if answer is not None else [], **kw)
    server = FakeServer(script)
    fakes.append(server)
    return RemoteEngine(server.url)


def settings(max_tokens: int) -> SamplingSettings:
    return replace(GREEDY, max_new_tokens=max_tokens)


def one_line(error: BaseException) -> str:
    text = str(error)
    assert "\n" not in text and "Traceback" not in text and len(text) < 400, text
    return text


def test_max_tokens_is_enforced_and_the_connection_closed(fakes: list[FakeServer]) -> None:
    engine = engine_for(fakes, endless_tokens())
    gen = engine.chat(HELLO, settings(7))
    events = list(gen)
    assert len(events) == 7 and gen.stats.finish_reason == "length"
    assert gen.text == "tok" * 7
    server = fakes[0]
    deadline = time.monotonic() + 10
    while server.cut_by_client == 0:  # the server notices the client left
        assert time.monotonic() < deadline, "the stream was never closed"
        time.sleep(0.01)


def test_without_logprobs_chunks_count_as_tokens(fakes: list[FakeServer]) -> None:
    engine = engine_for(fakes, endless_tokens(logprob=None))
    gen = engine.chat(HELLO, settings(5))
    assert len(list(gen)) == 5 and gen.stats.finish_reason == "length"


@pytest.mark.parametrize(("max_tokens", "cap"), [(10, 64 * 10 + 4096), (10**6, MAX_ANSWER_CHARS)])
def test_an_answer_is_capped_in_characters(
    fakes: list[FakeServer], max_tokens: int, cap: int
) -> None:
    huge = event(delta("x" * 2**19))  # half a megabyte of text per token
    engine = engine_for(fakes, [stream_head(), *[huge] * 8, END])
    gen = engine.chat(HELLO, settings(max_tokens))
    with pytest.raises(RemoteStreamError) as caught:
        list(gen)
    assert f"more than {cap} characters for an answer of at most" in one_line(caught.value)
    assert len(gen.text) <= cap and gen.stats.finish_reason == "error"


def test_endless_chunks_without_a_token_are_cut(fakes: list[FakeServer]) -> None:
    engine = engine_for(fakes, endless_bytes(b'data: {"choices": []}\n\n'))
    with pytest.raises(RemoteStreamError) as caught:
        list(engine.chat(HELLO, settings(100)))
    assert f"sent {MAX_IDLE_CHUNKS} chunks in a row without a token" in one_line(caught.value)


@pytest.mark.parametrize(
    "piece", [b": keep-alive\n", b"\n", b"\r\n: x\r\n"], ids=["comments", "blank", "crlf"]
)
def test_a_gigabyte_of_nothing_is_cut_at_the_stream_cap(
    fakes: list[FakeServer], piece: bytes
) -> None:
    engine = engine_for(fakes, endless_bytes(piece))
    with pytest.raises(RemoteStreamError) as caught:
        list(engine.chat(HELLO, settings(100)))
    assert f"more than {MAX_STREAM_BYTES // 2**20} MB" in one_line(caught.value)
    assert fakes[0].sent_bytes < 2 * MAX_STREAM_BYTES


def test_one_endless_event_is_refused(fakes: list[FakeServer]) -> None:
    engine = engine_for(fakes, endless_bytes(b"data: xxxxxxxxxxxxxxxx"))
    with pytest.raises(RemoteStreamError) as caught:
        list(engine.chat(HELLO, settings(100)))
    assert "an event larger than 4 MB" in one_line(caught.value)


def test_stop_ends_a_gigabyte_stream_at_once(fakes: list[FakeServer]) -> None:
    stop = threading.Event()
    engine = engine_for(fakes, endless_bytes(b": keep-alive\n"))
    gen = engine.chat(HELLO, settings(100), should_stop=stop.is_set)
    ended = threading.Event()
    reader = threading.Thread(target=lambda: (list(gen), ended.set()))
    reader.start()
    deadline = time.monotonic() + 30
    while fakes[0].sent_bytes < 4 * 2**20:  # the gigabyte is on its way
        assert time.monotonic() < deadline
        time.sleep(0.005)
    stop.set()
    assert ended.wait(5)
    reader.join(5)
    assert gen.stats.finish_reason == "stop"
    deadline = time.monotonic() + 5
    while fakes[0].cut_by_client == 0:  # the reader thread closed the connection too
        assert time.monotonic() < deadline, "the abandoned stream is still being read"
        time.sleep(0.01)


@pytest.mark.parametrize("value", [2**31, 1e30, 10**400, -5, True, "8192", 2**30 + 1])
def test_absurd_context_lengths_are_not_believed(fakes: list[FakeServer], value: object) -> None:
    engine = engine_for(fakes, listing=models_listing(max_model_len=value))
    assert engine.max_context == 0  # "not said", as for a server that sends nothing
    other = engine_for(fakes, listing=models_listing(meta={"n_ctx_train": value}))
    assert other.max_context == 0


def test_absurd_numbers_in_a_stream_raise_nothing(fakes: list[FakeServer]) -> None:
    text = (
        '{"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": "stop", '
        '"logprobs": {"content": [{"token": "a", "logprob": ' + "9" * 400 + "}]}}], "
        '"usage": {"prompt_tokens": ' + str(2**63) + ', "completion_tokens": 1e30}, '
        '"chatapp": {"tokens_per_s": ' + "9" * 400 + ', "loop": "naive", "x": [1]}}'
    )
    engine = engine_for(fakes, [stream_head(), event(text), event("[DONE]"), END])
    gen = engine.chat(HELLO, settings(10))
    events = list(gen)
    assert gen.text == "a" and len(events) == 1
    assert gen.stats.prompt_tokens == 0 and gen.stats.usage_tokens is None
    assert gen.stats.server_figures == {"loop": "naive"}
    gen.stats.to_dict()  # the window's figures are built from it


def test_an_html_error_page_is_one_line(fakes: list[FakeServer]) -> None:
    engine = engine_for(fakes, html_page(500))
    with pytest.raises(RemoteHTTPError) as caught:
        list(engine.chat(HELLO, settings(10)))
    line = one_line(caught.value)
    assert line.endswith("answered 500: 500 Internal Server Error (an HTML error page)")
    assert "<" not in line


def test_a_gigabyte_error_page_is_read_only_in_part(fakes: list[FakeServer]) -> None:
    head = (
        b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\n"
        b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
    )
    endless = endless_bytes(b"upstream failed \x1b[31m")
    next(endless)  # its own stream head
    engine = engine_for(fakes, [head, *(next(endless) for _ in range(4))])
    with pytest.raises(RemoteHTTPError) as caught:
        list(engine.chat(HELLO, settings(10)))
    line = one_line(caught.value)
    assert "answered 502: upstream failed" in line and "\x1b" not in line


def test_a_model_list_that_is_a_page_or_too_big_is_one_line(fakes: list[FakeServer]) -> None:
    for listing, words in (
        (html_page(500)[0], "answered 500: 500 Internal Server Error"),
        (json_response(200, {"data": [{"id": "x" * 100}] * 50_000}), "larger than 4 MB"),
    ):
        server = FakeServer(hostile(lambda _r: [], listing=listing))  # type: ignore[arg-type]
        fakes.append(server)
        with pytest.raises(RemoteError) as caught:
            RemoteEngine(server.url)
        assert words in one_line(caught.value)


@pytest.mark.parametrize(
    "chunk_text",
    [
        '{"choices": "Hello"}',
        '{"choices": ["Hello"]}',
        '{"choices": {"0": {"delta": {"content": "x"}}}}',
    ],
)
def test_malformed_choices_are_a_clear_line(fakes: list[FakeServer], chunk_text: str) -> None:
    engine = engine_for(fakes, [stream_head(), event(chunk_text), event("[DONE]"), END])
    gen = engine.chat(HELLO, settings(10))
    with pytest.raises(RemoteStreamError) as caught:
        list(gen)
    assert "choices is not a list of objects" in one_line(caught.value)


@pytest.mark.parametrize(
    "answer",
    [
        [stream_head(), event({"object": "chat.completion.chunk"}), event("[DONE]"), END],
        [json_response(200, {"id": "x", "object": "chat.completion"})],
        [json_response(200, {"choices": []})],
    ],
    ids=["stream without choices", "whole without choices", "empty choices"],
)
def test_an_answer_without_choices_is_not_an_empty_answer(
    fakes: list[FakeServer], answer: list[Action]
) -> None:
    engine = engine_for(fakes, answer)
    gen = engine.chat(HELLO, settings(10))
    with pytest.raises(RemoteStreamError) as caught:
        list(gen)
    assert "sent no answer" in one_line(caught.value)


def test_an_honest_empty_answer_is_still_an_answer(fakes: list[FakeServer]) -> None:
    engine = engine_for(fakes, [stream_head(), event(delta("", "stop")), event("[DONE]"), END])
    gen = engine.chat(HELLO, settings(10))
    assert list(gen) == [] and gen.text == "" and gen.stats.finish_reason == "eos"


def test_a_server_that_is_not_a_stream_is_one_line(fakes: list[FakeServer]) -> None:
    def answer(_request: Request) -> list[Action]:
        body = b"hello " * 10
        return [b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 60\r\n\r\n" + body]

    server = FakeServer(hostile(answer))
    fakes.append(server)
    with pytest.raises(RemoteStreamError) as caught:
        list(RemoteClient(server.url).stream_chat({}))
    assert "not a stream of server-sent events" in one_line(caught.value)
