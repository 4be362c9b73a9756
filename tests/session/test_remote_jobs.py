"""Listing, connecting, answering through a remote server and going back, run without Qt
(tests/session/drive.py) against `chatapp serve` in this process, on 127.0.0.1."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.engine.backend import BackendCard
from chatapp.engine.engine import Engine
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message
from chatapp.remote import ServerListing
from chatapp.remote.card import LOOP_ABSENT, server_card
from chatapp.remote.engine import RemoteEngine, RemoteStats
from chatapp.remote.errors import RemoteConnectionError, RemoteHTTPError
from chatapp.session.answer import TOOLS_NOT_HERE
from chatapp.session.chat_jobs import (
    AnswerResult,
    StatsSnapshot,
    TokenItem,
    answer_figures,
    measure_context_job,
    measured_request,
    window_job,
)
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.model_jobs import EngineHost, LoadRequest, load_job
from chatapp.session.remote_jobs import (
    ConnectRequest,
    backend_message,
    connect_job,
    disconnect_job,
    list_models_job,
)
from tests.serving import Served, serving
from tests.session.drive import drive

GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8)
HELLO = (Message("user", "hello"),)
NAIVE = GenerationOptions(GREEDY, Mode.NAIVE)  # the window's loop: a server uses its own


@pytest.fixture(scope="module")
def served(varied_model_dir: Path) -> Iterator[Served]:
    with serving(Engine(varied_model_dir, threads=1)) as s:
        yield s


def connected(served: Served) -> EngineHost:
    host = EngineHost()
    out = drive(connect_job(host, ConnectRequest(served.url)))
    assert isinstance(out.result, BackendCard), out.message
    return host


def test_the_listing_names_the_models_and_has_no_notice_on_loopback(served: Served) -> None:
    out = drive(list_models_job(ConnectRequest(served.api, api_key="a-key-that-stays-here")))
    listing: ServerListing = out.result
    assert [m.id for m in listing.models] == ["varied-llama"]
    assert listing.models[0].context_length == 512
    assert listing.server == served.url and listing.notice is None


def test_a_request_never_shows_its_key() -> None:
    request = ConnectRequest("http://127.0.0.1:9/v1", api_key="a-key-that-stays-here")
    assert "a-key-that-stays-here" not in repr(request)  # a log line may print the request


def test_connecting_makes_the_server_the_chat_backend(served: Served) -> None:
    host = connected(served)
    card = drive(connect_job(host, ConnectRequest(served.api))).result
    assert card.name == "varied-llama" and card.max_context == 512
    assert card.own_figures and card.server == served.url  # chatapp serve reports its own
    assert "varied-llama on http://127.0.0.1" in card.description
    assert isinstance(host.backend(), RemoteEngine) and host.engine is None
    assert host.backend().card() == card


def test_a_servers_card_says_what_is_measured_here_and_why_not_the_rest(served: Served) -> None:
    card = drive(connect_job(EngineHost(), ConnectRequest(served.api))).result
    assert not card.capabilities.chooses_loop and not card.capabilities.calls_tools
    measured = {m.key for m in card.measures if m.reported}
    assert measured == {"ttft", "tokens_per_second", "perplexity", "context"}
    for key in ("prompt_perplexity", "transfer"):  # only the server could count them
        assert "remote server" in card.measure(key).absent, key
    assert "log-probs" in card.measure("perplexity").missing  # when a server sends none
    assert "usage" in card.measure("context").missing
    # chatapp serve describes its engine in /v1/models (its own card): the same words.
    engine = served.worker.engine.card()
    for label in ("Device", "Loop", "Threads", "KV bytes per token"):
        assert card.fact(label).value == engine.fact(label).value is not None, label
    assert card.fact("Server").value == served.url
    # A server that describes nothing (llama.cpp's, vLLM's): each fact says why it is absent.
    bare = server_card("m.gguf", "http://127.0.0.1:8080", 0, False, None)
    for label in ("Device", "Loop", "Threads", "KV bytes per token", "Context"):
        fact = bare.fact(label)
        assert fact.value is None and fact.absent, label
    assert bare.fact("Loop").absent == LOOP_ABSENT and bare.max_context == 0


def test_a_remote_answer_streams_without_a_context_report(
    served: Served, varied_model_dir: Path
) -> None:
    host = connected(served)
    out = drive(window_job(host, HELLO, NAIVE), request_id=3)
    assert all(isinstance(i, TokenItem) for i in out.items)  # no ContextReport: no tokenizer
    assert all(i.token_id is None for i in out.items)  # servers send text, not ids
    result: AnswerResult = out.result
    expected = Engine(varied_model_dir, threads=1).chat(list(HELLO), GREEDY)
    expected.run()
    assert result.text == expected.text
    assert "".join(i.text for i in out.items) == result.text
    assert out.flushed_at[0] == 1  # the first token went out at once
    stats = result.stats
    # The window's loop is not sent: the server used its own default, in its own figures.
    assert stats.server_figures is not None and stats.server_figures["loop"] == "iobinding"


def test_remote_figures_leave_out_what_a_client_cannot_measure(served: Served) -> None:
    host = connected(served)
    result: AnswerResult = drive(window_job(host, HELLO, NAIVE)).result
    figures = answer_figures(result.stats)
    assert figures.mode == figures.device == "remote" and figures.model == "varied-llama"
    assert figures.generated_tokens == 8 and figures.finish_reason == "length"
    assert figures.tokens_per_s and figures.ttft_s and figures.perplexity  # measured here
    assert figures.prompt_tokens == result.stats.prompt_tokens > 0  # the server's usage
    for unknown in ("h2d_bytes_per_token", "d2h_bytes_per_token", "prompt_perplexity"):
        assert getattr(figures, unknown) is None, unknown  # not 0: not measurable here
    assert figures.reused_tokens is None
    snapshot = StatsSnapshot.of(7, result.stats)
    assert snapshot.figures == figures and snapshot.server_figures is not None
    assert snapshot.server_figures["device"] == "cpu"
    assert answer_figures(result.stats, "error").finish_reason == "error"


def test_no_usage_means_the_prompt_size_is_unknown() -> None:
    stats = RemoteStats(mode="remote", device="remote", model="m", received_tokens=2)
    assert answer_figures(stats).prompt_tokens is None
    assert math.isnan(stats.perplexity) and answer_figures(stats).perplexity is None


def test_the_context_is_not_measured_while_a_server_answers(
    served: Served, tiny_model_dir: Path
) -> None:
    host = connected(served)
    host.engine = Engine(tiny_model_dir, threads=1)
    request = measured_request(HELLO, NAIVE)
    assert drive(measure_context_job(host, request)).result is None
    drive(disconnect_job(host))
    assert host.remote is None and host.backend() is host.engine
    assert drive(measure_context_job(host, request)).result is not None


def test_opening_a_local_model_ends_the_connection(served: Served, tiny_model_dir: Path) -> None:
    host = connected(served)
    remote = host.remote
    assert remote is not None
    out = drive(load_job(host, LoadRequest(tiny_model_dir, threads=1)))
    assert out.error is None and host.remote is None and host.backend() is host.engine
    assert remote.client.http.is_closed


def test_a_refused_connection_is_one_sentence_and_keeps_the_backend(served: Served) -> None:
    host = connected(served)
    before = host.remote
    with serving_nothing() as url:
        out = drive(connect_job(host, ConnectRequest(url)))
    assert isinstance(out.error, RemoteConnectionError)
    assert out.message is not None and out.message.startswith("Could not connect to")
    assert "\n" not in out.message and host.remote is before


def test_a_conversation_too_long_for_the_server_says_what_to_do() -> None:
    exc = RemoteHTTPError(
        "http://gpu:8000 answered 400: the prompt is too long", 400, "context_length_exceeded"
    )
    text = backend_message(exc)
    assert text.startswith("http://gpu:8000 answered 400") and "start a new chat" in text
    other = RemoteHTTPError("http://gpu:8000 answered 400: temperature must be <= 2", 400)
    assert backend_message(other) == str(other)


def test_an_overlong_conversation_against_chatapp_serve(served: Served) -> None:
    host = connected(served)
    long_question = (Message("user", "word " * 3000),)  # far beyond the 512-token context
    out = drive(window_job(host, long_question, NAIVE))
    assert isinstance(out.error, RemoteHTTPError)
    assert out.error.code == "context_length_exceeded"
    assert out.message is not None and "start a new chat" in out.message


class serving_nothing:
    """A loopback address where nothing listens (a port bound, then released)."""

    def __enter__(self) -> str:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *_exc: object) -> None:
        return None


def test_tools_asked_of_a_server_are_one_sentence(served: Served) -> None:
    from chatapp.engine.structured.tool_calls import Tool

    host = connected(served)
    out = drive(window_job(host, HELLO, replace(NAIVE, tools=(Tool("pick"),))))
    assert out.message == TOOLS_NOT_HERE and out.result is None
