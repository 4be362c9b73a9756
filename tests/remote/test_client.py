"""The remote client's failures, each one line that keeps what arrived: refused connections,
malformed streams, cuts, silence; and the addresses it will not contact."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from chatapp.engine.errors import EngineError
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message
from chatapp.remote.client import MAX_FACTS, Timeouts, _model, api_base
from chatapp.remote.engine import RemoteEngine
from chatapp.remote.errors import (
    RemoteAddressError,
    RemoteConnectionError,
    RemoteDisconnected,
    RemoteHTTPError,
    RemoteStreamError,
    RemoteTimeout,
)
from tests.remote.fake_server import (
    END,
    MODELS,
    Action,
    FakeServer,
    Request,
    Script,
    delta,
    event,
    json_response,
    response,
    stream_head,
    with_models,
)

HI = [Message("user", "hi")]
SETTINGS = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8)


@pytest.fixture
def fake() -> Iterator[list[FakeServer]]:
    """Start fakes with `start(script)`; all are closed after the test."""
    started: list[FakeServer] = []
    yield started
    for server in started:
        server.close()


def start(fakes: list[FakeServer], script: Script) -> FakeServer:
    server = FakeServer(script)
    fakes.append(server)
    return server


def one_line(exc: pytest.ExceptionInfo[EngineError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


@pytest.mark.parametrize(
    ("given", "base"),
    [
        ("127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("https://gpu-node.example:443/proxy", "https://gpu-node.example:443/proxy/v1"),
        ("http://[::1]:8080", "http://[::1]:8080/v1"),
    ],
)
def test_addresses_are_normalised_to_the_api_base(given: str, base: str) -> None:
    assert api_base(given) == base


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("", "Enter the server's address"),
        ("ftp://host", "http:// or https://"),
        ("http://host:port", "not a number"),
        ("http://user:secret@host", "API key field"),
    ],
)
def test_addresses_it_will_not_use_are_refused(given: str, words: str) -> None:
    with pytest.raises(RemoteAddressError, match=words):
        api_base(given)


def test_connection_refused_is_one_line() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RemoteConnectionError) as exc:
        RemoteEngine(f"http://127.0.0.1:{port}")
    assert "Could not connect to http://127.0.0.1:" in one_line(exc)
    assert "is the server running" in str(exc.value)


def test_a_server_that_is_not_openai_compatible(fake: list[FakeServer]) -> None:
    server = start(fake, lambda r: [response(200, b"<html>hello</html>", "text/html")])
    with pytest.raises(RemoteStreamError, match="not JSON; is this an OpenAI-compatible"):
        RemoteEngine(server.url)


def test_http_errors_carry_the_servers_message(fake: list[FakeServer]) -> None:
    def script(request: Request) -> list[Action]:
        error = {"error": {"message": "This model's maximum context is 2048.", "code": "ctx"}}
        return [json_response(400, error)]

    server = start(fake, with_models(script))
    engine = RemoteEngine(server.url)
    with pytest.raises(RemoteHTTPError) as exc:
        engine.chat(HI, SETTINGS).run()
    assert one_line(exc).endswith("answered 400: This model's maximum context is 2048.")
    assert exc.value.status == 400 and exc.value.code == "ctx"


def test_malformed_stream_keeps_what_came_before(fake: list[FakeServer]) -> None:
    def script(request: Request) -> list[Action]:
        return [stream_head(), event(delta("Hel")), event("{not json"), END]

    engine = RemoteEngine(start(fake, with_models(script)).url)
    gen = engine.chat(HI, SETTINGS)
    with pytest.raises(RemoteStreamError) as exc:
        gen.run()
    assert "malformed stream: '{not json' is not JSON" in one_line(exc)
    assert "The 1 tokens received are kept" in str(exc.value)
    assert gen.text == "Hel" and gen.stats.finish_reason == "error" and gen.error is exc.value


@pytest.mark.parametrize(
    "bad",
    [
        event({"choices": [{"index": 0, "delta": "text"}]}),
        event({"choices": [{"index": 0, "delta": {"content": 5}}]}),
        event("[1, 2]"),
    ],
)
def test_chunks_of_the_wrong_shape_are_malformed(fake: list[FakeServer], bad: bytes) -> None:
    engine = RemoteEngine(start(fake, with_models(lambda r: [stream_head(), bad, END])).url)
    with pytest.raises(RemoteStreamError, match="malformed stream"):
        engine.chat(HI, SETTINGS).run()


def test_connection_cut_mid_answer(fake: list[FakeServer]) -> None:
    def script(request: Request) -> list[Action]:
        return [stream_head(), event(delta("Hello")), event(delta(" wor")), None]

    engine = RemoteEngine(start(fake, with_models(script)).url)
    gen = engine.chat(HI, SETTINGS)
    with pytest.raises(RemoteDisconnected) as exc:
        gen.run()
    assert "closed the connection while answering" in one_line(exc)
    assert gen.text == "Hello wor" and gen.stats.received_tokens == 2


def test_stream_that_ends_without_finishing(fake: list[FakeServer]) -> None:
    engine = RemoteEngine(
        start(fake, with_models(lambda r: [stream_head(), event(delta("a")), END])).url
    )
    with pytest.raises(RemoteDisconnected, match="ended the stream before the answer was complete"):
        engine.chat(HI, SETTINGS).run()


def test_error_reported_mid_stream(fake: list[FakeServer]) -> None:
    def script(request: Request) -> list[Action]:
        error = {"error": {"message": "CUDA out of memory", "type": "server_error"}}
        return [stream_head(), event(delta("x")), event(error), event("[DONE]"), END]

    gen = RemoteEngine(start(fake, with_models(script)).url).chat(HI, SETTINGS)
    with pytest.raises(RemoteHTTPError, match="reported an error mid-answer: CUDA out of memory"):
        gen.run()
    assert gen.text == "x"


def test_silence_is_a_timeout_that_keeps_the_text(fake: list[FakeServer]) -> None:
    def script(request: Request) -> list[Action]:
        return [stream_head(), event(delta("slow")), 5.0, event(delta("!", "stop")), END]

    engine = RemoteEngine(start(fake, with_models(script)).url, timeouts=Timeouts(read_s=0.3))
    gen = engine.chat(HI, SETTINGS)
    with pytest.raises(RemoteTimeout) as exc:
        gen.run()
    assert "sent nothing for 0.3 s while answering" in one_line(exc)
    assert gen.text == "slow"


def test_a_server_that_ignores_stream_true_still_answers(fake: list[FakeServer]) -> None:
    whole = {
        "choices": [{"index": 0, "message": {"content": "Paris."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3},
    }
    engine = RemoteEngine(start(fake, with_models(lambda r: [json_response(200, whole)])).url)
    gen = engine.chat(HI, SETTINGS)
    stats = gen.run()
    assert gen.text == "Paris." and stats.finish_reason == "eos"
    assert stats.generated_tokens == 3 and stats.prompt_tokens == 9


def test_a_server_refusing_logprobs_is_asked_again_without(fake: list[FakeServer]) -> None:
    def script(request: Request) -> list[Action]:
        if request.json().get("logprobs"):
            return [json_response(400, {"error": {"message": "logprobs is not supported"}})]
        return [stream_head(), event(delta("ok", "stop")), event("[DONE]"), END]

    server = start(fake, with_models(script))
    engine = RemoteEngine(server.url)
    gen = engine.chat(HI, SETTINGS)
    assert gen.run().finish_reason == "eos" and gen.text == "ok"
    assert not gen.stats.has_logprobs and gen.stats.perplexity != gen.stats.perplexity  # nan
    engine.chat(HI, SETTINGS).run()  # remembered: one request, not two
    chats = [r for r in server.requests if r.path.endswith("/chat/completions")]
    assert [bool(r.json().get("logprobs")) for r in chats] == [True, False, False]


def test_redirects_are_not_followed(fake: list[FakeServer]) -> None:
    elsewhere = start(fake, lambda r: [MODELS])
    server = start(fake, lambda r: [response(302, b"", location=f"{elsewhere.url}/v1/models")])
    with pytest.raises(
        RemoteHTTPError, match=r"redirects to http://127\.0\.0\.1:.*give that address"
    ):
        RemoteEngine(server.url)
    assert elsewhere.requests == []  # only the address the user gave was contacted


def test_proxy_settings_are_ignored(
    fake: list[FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start(fake, lambda r: [MODELS])
    server = start(fake, lambda r: [MODELS])
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert RemoteEngine(server.url).model.id == "fake"
    assert proxy.requests == [] and len(server.requests) == 1


def test_the_key_is_sent_as_a_bearer_header_and_flagged_over_plain_http(
    fake: list[FakeServer],
) -> None:
    server = start(fake, lambda r: [MODELS])
    engine = RemoteEngine(server.url, api_key="sekrit-key")
    assert server.requests[0].headers["authorization"] == "Bearer sekrit-key"
    assert engine.notice is None  # loopback: the key does not leave the machine
    assert "sekrit" not in engine.server


def test_a_servers_card_facts_keep_only_short_printable_text() -> None:
    """A chatapp server's /v1/models entry describes its engine; a hostile one's facts are
    cut or dropped, never shown whole (the window prints them in the side panel)."""
    facts = {
        "Device": "CPU",
        "Loop": "IO-Binding",
        "Threads": 4,  # not text
        "Precision": None,
        "x" * 41: "a label too long",
        "Kernels": "A" * 5000,
        "Bell": "ring\x07",
        "": "no label",
        **{f"extra {i}": "v" for i in range(100)},
    }
    entry = {"id": "m", "owned_by": "chatapp", "chatapp": {"card": {"facts": facts}}}
    kept = dict(_model(entry).facts)
    assert kept["Device"] == "CPU" and kept["Loop"] == "IO-Binding"
    assert len(kept["Kernels"]) == 200 and "Threads" not in kept and "Precision" not in kept
    assert "Bell" not in kept and "" not in kept and "x" * 41 not in kept
    assert len(kept) <= MAX_FACTS
    for hostile in ({"chatapp": "no"}, {"chatapp": {"card": []}}, {"chatapp": {"card": {}}}):
        assert _model({"id": "m", **hostile}).facts == ()
