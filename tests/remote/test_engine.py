"""RemoteEngine against `chatapp serve`: the same answer as the local engine, figures measured
on the client, Stop, a server that waits too long, and a server killed mid-answer."""

from __future__ import annotations

import math
import socket
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY, SamplingSettings
from chatapp.engine.text.chat import Message
from chatapp.remote.client import Timeouts
from chatapp.remote.engine import RemoteEngine, RemoteEvent
from chatapp.remote.errors import RemoteDisconnected, RemoteError, RemoteTimeout
from tests.remote.conftest import ServerProcess
from tests.serving import Served, serving, slow_down

HELLO = [Message("user", "hello")]


def greedy(n: int) -> SamplingSettings:
    return replace(GREEDY, max_new_tokens=n)


def test_connects_and_lists_the_model(served: Served) -> None:
    engine = RemoteEngine(served.url)  # no /v1: added
    assert engine.model.id == "varied-llama" and engine.max_context == 512
    assert engine.is_chatapp and engine.server == served.url
    with pytest.raises(RemoteError, match="does not serve 'other'"):
        RemoteEngine(served.url, model="other")


def test_streamed_answer_and_client_side_figures(served: Served, reference: Engine) -> None:
    engine = RemoteEngine(served.api)
    gen = engine.chat(HELLO, greedy(12), mode="naive")
    events = list(gen)
    expected = reference.chat(HELLO, greedy(12))
    expected.run()
    assert gen.text == expected.text
    # The events carry all of the text: a character held back comes as a last `tail` event.
    assert "".join(e.text for e in events) == expected.text
    assert [e.index for e in events if not e.tail] == list(range(12))
    stats = gen.stats
    assert stats.mode == stats.device == "remote" and stats.finish_reason == "length"
    assert stats.generated_tokens == stats.received_tokens == stats.usage_tokens == 12
    assert stats.prompt_tokens == expected.stats.prompt_tokens
    assert stats.logprobs == pytest.approx(expected.stats.logprobs, abs=1e-5)
    assert stats.perplexity == pytest.approx(expected.stats.perplexity, rel=1e-4)
    assert stats.ttft_s > 0 and len(stats.latencies_s) == 11 and stats.tokens_per_s > 0
    assert math.isnan(stats.prompt_perplexity)  # not something a client can see
    assert stats.h2d_bytes_per_token == 0 and stats.steps == []  # nor the transfers
    # A chatapp server reports its own side: the loop it used, its device.
    assert stats.server_figures["loop"] == "naive" and stats.server_figures["device"] == "cpu"
    assert stats.to_dict()["unavailable"][:2] == ["loop", "device"]


def test_sampling_settings_reach_the_server(served: Served) -> None:
    engine = RemoteEngine(served.api)
    settings = SamplingSettings(temperature=0.9, top_k=5, top_p=0.8, seed=3, max_new_tokens=6)
    body = engine.request_body(HELLO, settings, "iobinding")
    assert body["top_k"] == 5 and body["seed"] == 3 and body["top_p"] == 0.8
    assert body["repetition_penalty"] == body["repeat_penalty"] == 1.1
    assert body["repeat_last_n"] == -1  # all, as here: llama.cpp's own default is 64
    assert body["chatapp"] == {"loop": "iobinding"}  # only because the server is chatapp
    first, again = engine.chat(HELLO, settings), engine.chat(HELLO, settings)
    first.run()
    again.run()
    assert first.text == again.text  # seeded: the server sampled the same way


def test_a_penalized_answer_through_the_server_is_the_local_one(
    served: Served, reference: Engine
) -> None:
    """What the penalty looks at reaches a chatapp server (repeat_last_n), as it would a
    llama.cpp one: greedy, the same tokens as here, for all tokens and for the last 64."""
    settings = replace(greedy(40), repetition_penalty=5.0)
    # Many different tokens, then more than 64 of one: only the whole sequence sees the first.
    early = "The quick brown fox jumps over the lazy dog 0123456789 ,;:!?"
    long_chat = [Message("user", early + " a" * 80)]
    texts = []
    for last_n in (-1, 64):
        asked = replace(settings, penalty_last_n=last_n)
        expected = reference.chat(long_chat, asked)
        expected.run()
        remote = RemoteEngine(served.api).chat(long_chat, asked)
        remote.run()
        assert remote.text == expected.text
        texts.append(expected.text)
    assert texts[0] != texts[1]  # the two differ on this chat: the server did not ignore it


def test_stop_closes_the_stream_and_the_server_stops(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    restore = slow_down(engine, 0.01)
    seen: list[RemoteEvent] = []
    try:
        with serving(engine) as served:
            gen = RemoteEngine(served.url).chat(
                HELLO, greedy(400), should_stop=lambda: len(seen) >= 3
            )
            for event in gen:
                seen.append(event)
            (record,) = served.wait_for_records(1)
    finally:
        restore()
    assert gen.stats.finish_reason == "stop" and len(seen) == 3
    assert record.cancelled and record.engine_finish_reason in ("stop", "cancelled")
    assert record.generated_tokens < 400


def test_a_server_that_waits_too_long_times_out(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    gate = threading.Event()  # the engine holds at its first step until the gate opens
    restore = slow_down(engine, 0.0, gate)
    try:
        with serving(engine) as served:
            remote = RemoteEngine(served.url, timeouts=Timeouts(read_s=0.5))
            with pytest.raises(RemoteTimeout, match=r"sent nothing for 0\.5 s while answering"):
                remote.chat(HELLO, greedy(5)).run()
            worker = served.worker
            served.wait_until(  # the client's leaving reached the server
                lambda: any(
                    j.cancelled.is_set() for j in [worker.running, *worker.waiting_requests()] if j
                )
            )
            gate.set()
            (record,) = served.wait_for_records(1)
    finally:
        gate.set()
        restore()
    assert record.cancelled and record.engine_finish_reason in ("stop", "cancelled")


def test_server_killed_mid_answer_keeps_what_arrived(killable_server: ServerProcess) -> None:
    gen = RemoteEngine(killable_server.url).chat(HELLO, greedy(400))
    received = ""
    with pytest.raises(RemoteDisconnected) as exc:
        for event in gen:
            received += event.text
            if event.index == 2:
                killable_server.process.kill()  # SIGKILL: no goodbye, mid-answer
    message = str(exc.value)
    assert "closed the connection while answering" in message and "\n" not in message
    assert gen.stats.received_tokens >= 3 and gen.text == received
    assert f"The {gen.stats.received_tokens} tokens received are kept." in message
    assert gen.stats.finish_reason == "error"


def test_a_helper_server_listens_as_soon_as_it_announces_its_address(
    killable_server: ServerProcess,
) -> None:
    """The load race: an address printed after bind() but before listen() refused a client
    that connected at once ("Connection refused" on a fresh clone)."""
    host, port = killable_server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        pass  # accepted (refused would raise ConnectionRefusedError)
