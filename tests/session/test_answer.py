"""session/answer.py: the one answering path, seen through the window's job (no display), a
served model (HTTP) and `chatapp generate` (a process). References are computed here, on this
machine: the first answer of each test is the one the others must equal."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx2
import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.errors import ContextOverflowError, EngineError
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.structured.constraints import ConstraintError, OutputFormat
from chatapp.engine.text.chat import STYLE_CONTINUE, STYLE_TEMPLATE, Message
from chatapp.remote.engine import RemoteEngine
from chatapp.session.answer import (
    AnswerDone,
    AnswerRequest,
    ContextPolicy,
    Opened,
    TextDelta,
    answer,
)
from chatapp.session.chat_jobs import TokenItem, window_job
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.context import ContextReport
from chatapp.session.model_jobs import EngineHost
from tests.serving import Served, serving
from tests.session.drive import Outcome, drive

PROMPT = "in the"
GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=24)
LONG = "a " * 700  # more tokens than the tiny models' 512


@pytest.fixture(scope="module")
def host(varied_model_dir: Path) -> EngineHost:
    host = EngineHost()
    host.engine = Engine(varied_model_dir, threads=1)
    return host


@pytest.fixture(scope="module")
def served(varied_model_dir: Path) -> Iterator[Served]:
    with serving(Engine(varied_model_dir, threads=1)) as s:
        yield s


def window(host: EngineHost, messages: tuple[Message, ...], stops: tuple[str, ...] = ()) -> Outcome:
    options = GenerationOptions(GREEDY, Mode.IOBINDING, stops=stops)
    return drive(window_job(host, messages, options))


def server(served: Served, messages: list[dict[str, str]], stops: list[str]) -> httpx2.Response:
    body = {"messages": messages, "temperature": 0, "max_tokens": GREEDY.max_new_tokens}
    if stops:
        body["stop"] = stops
    return httpx2.post(f"{served.api}/chat/completions", json=body, timeout=120, trust_env=False)


def generate(model: Path, prompt: str, stops: list[str]) -> subprocess.CompletedProcess[str]:
    args = ["--model", str(model), "--prompt", prompt, "--greedy", "--threads", "1", "--json"]
    args += ["--repetition-penalty", "1"]  # as GREEDY: the server adds none by default
    args += ["--max-new-tokens", str(GREEDY.max_new_tokens)]
    for stop in stops:
        args += ["--stop", stop]
    return subprocess.run(
        [sys.executable, "-m", "chatapp", "generate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_window_the_server_and_generate_give_the_same_answer_and_stop_alike(
    host: EngineHost, served: Served, varied_model_dir: Path
) -> None:
    question = (Message("user", PROMPT),)
    whole = window(host, question)
    assert whole.error is None, whole.message
    text, ids = whole.result.text, whole.result.stats.token_ids
    assert len(ids) == GREEDY.max_new_tokens and len(text) > 6
    # A stop string taken from the middle of this machine's answer: all three end before it.
    cut = len(text) // 2
    stop = text[cut : cut + 3]
    before = text[: text.index(stop)]

    stopped = window(host, question, (stop,))
    shown = "".join(i.text for i in stopped.items if isinstance(i, TokenItem))
    assert stopped.result.text == shown == before
    assert stopped.result.figures.finish_reason == "stop_string"

    for stops in ([], [stop]):
        response = server(served, [{"role": "user", "content": PROMPT}], stops)
        assert response.status_code == 200, response.text
        choice = response.json()["choices"][0]
        assert choice["message"]["content"] == (before if stops else text)
        assert choice["finish_reason"] == ("stop" if stops else "length")

        out = generate(varied_model_dir, PROMPT, stops)
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["text"] == (before if stops else text)
        assert data["finish"] == ("stop_string" if stops else "length")  # the window's word
        if not stops:
            assert data["token_ids"] == ids


def test_a_prompt_too_long_is_trimmed_for_the_window_and_refused_by_the_server_and_generate(
    host: EngineHost, served: Served, varied_model_dir: Path
) -> None:
    turns = (Message("user", LONG), Message("assistant", "ok"), Message("user", PROMPT))
    trimmed = window(host, turns)
    assert trimmed.error is None, trimmed.message
    report = next(i for i in trimmed.items if isinstance(i, ContextReport))
    assert report.dropped >= 2  # the oldest turns that no longer fit are not sent
    # ... and the answer is the one to the turn that is left.
    assert trimmed.result.text == window(host, (Message("user", PROMPT),)).result.text

    refused = server(served, [{"role": "user", "content": LONG}], [])
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"

    out = generate(varied_model_dir, LONG, [])
    assert out.returncode == 2 and "context holds 512" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1  # one line, no traceback


def test_refusing_is_the_same_policy_at_the_session_level(host: EngineHost) -> None:
    assert host.engine is not None
    request = AnswerRequest((Message("user", LONG),), GREEDY, context=ContextPolicy.REFUSE)
    with pytest.raises(ContextOverflowError, match="context holds 512"):
        list(answer(host.engine, request, lambda: False))


def test_the_events_come_in_order_and_add_up_to_the_answer(host: EngineHost) -> None:
    assert host.engine is not None
    request = AnswerRequest((Message("user", PROMPT),), GREEDY, context=ContextPolicy.TRIM)
    events = list(answer(host.engine, request, lambda: False))
    assert isinstance(events[0], ContextReport) and isinstance(events[1], Opened)
    assert isinstance(events[-1], AnswerDone)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    done = events[-1]
    assert "".join(d.text for d in deltas) == done.text
    assert [t.token_id for d in deltas for t in d.tokens] == done.stats.token_ids
    refused = replace(request, context=ContextPolicy.REFUSE)
    assert not any(isinstance(e, ContextReport) for e in answer(host.engine, refused, bool))


def test_a_server_backend_answers_alike_and_refuses_what_its_capabilities_lack(
    host: EngineHost, served: Served
) -> None:
    assert host.engine is not None
    remote = RemoteEngine(served.api)
    try:
        request = AnswerRequest((Message("user", PROMPT),), GREEDY, context=ContextPolicy.TRIM)
        local = list(answer(host.engine, request, lambda: False))[-1]
        events = list(answer(remote, request, lambda: False))
        assert not any(isinstance(e, ContextReport) for e in events)  # its tokens are not known
        done = events[-1]
        assert isinstance(done, AnswerDone) and isinstance(local, AnswerDone)
        assert done.text == local.text
        with pytest.raises(ConstraintError, match="not a server"):
            as_json = replace(request, output_format=OutputFormat.json_object())
            list(answer(remote, as_json, lambda: False))
        with pytest.raises(EngineError, match="Continue works with a model run here"):
            list(answer(remote, replace(request, continue_last=True), lambda: False))
    finally:
        remote.close()


def test_a_requests_logit_bias_reaches_the_sampler(host: EngineHost) -> None:
    """The window and `generate` answer through the same path: a ban in the request's
    settings takes the greedy answer's first token away (reference computed here)."""
    assert host.engine is not None
    request = AnswerRequest((Message("user", PROMPT),), GREEDY)
    plain = list(answer(host.engine, request, lambda: False))[-1]
    assert isinstance(plain, AnswerDone)
    first = plain.stats.token_ids[0]
    biased = replace(request, settings=replace(GREEDY, logit_bias=((first, -100.0),)))
    done = list(answer(host.engine, biased, lambda: False))[-1]
    assert isinstance(done, AnswerDone)
    assert first not in done.stats.token_ids and done.text != plain.text


def test_text_continuation_answers_at_least_one_token(host: EngineHost) -> None:
    """Send in text continuation asks for what follows: an end of text the model puts first
    (here forced by a bias) is drawn around once; a chat may still end at once."""
    assert host.engine is not None
    eos = host.engine.info.eos_token_ids[0]
    forced = replace(GREEDY, logit_bias=((eos, 100.0),))
    chat = AnswerRequest((Message("user", PROMPT),), forced, prompt_style=STYLE_TEMPLATE)
    done = list(answer(host.engine, chat, lambda: False))[-1]
    assert isinstance(done, AnswerDone)
    assert done.stats.generated_tokens == 0 and done.stats.finish_reason == "eos"
    continued = replace(chat, prompt_style=STYLE_CONTINUE)
    done = list(answer(host.engine, continued, lambda: False))[-1]
    assert isinstance(done, AnswerDone)
    assert done.stats.generated_tokens == 1 and done.stats.finish_reason == "eos"
    assert eos not in done.stats.token_ids


def test_a_media_marker_is_never_sampled(host: EngineHost, monkeypatch: pytest.MonkeyPatch) -> None:
    """Image and sound markers (Gemma 3's <start_of_image>) promise media a converted model is
    never given: the tokenizer's markers reach the sampler, which draws around them."""
    assert host.engine is not None
    request = AnswerRequest((Message("user", PROMPT),), GREEDY)
    plain = list(answer(host.engine, request, lambda: False))[-1]
    assert isinstance(plain, AnswerDone)
    marker = plain.stats.token_ids[1]  # pretend the second token were a marker
    monkeypatch.setattr(host.engine.tokenizer._control, "media_ids", frozenset({marker}))
    done = list(answer(host.engine, request, lambda: False))[-1]
    assert isinstance(done, AnswerDone)
    assert marker not in done.stats.token_ids
    assert done.stats.token_ids[0] == plain.stats.token_ids[0]
