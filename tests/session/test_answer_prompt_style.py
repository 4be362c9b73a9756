"""The prompt style is part of each request, never the shared tokenizer's state (answer.py).

"Serve this model" serves the window's own Engine: a chat in Text continuation must not make
the API's requests render as continued text, and requests answered together must each get
the prompt their own request asks for. The window, `chatapp serve` and `chatapp generate`
give the same tokens for the same request. Expected ids are computed here, never stored.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import STYLE_CONTINUE, Message
from chatapp.server.token_text import TokenText
from chatapp.session.chat import Chat, GenerationOptions, State, chat_on
from chatapp.session.chat_jobs import window_job
from chatapp.session.engine_service import EngineService
from chatapp.session.model_jobs import EngineHost
from chatapp.session.running import InlineRunner
from tests.serving import Served, serving
from tests.session.drive import drive
from tests.session.test_jobs import Heard

NEW = 8
GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=NEW)
CHAT = GenerationOptions(GREEDY, Mode.IOBINDING)
CONTINUE = replace(CHAT, prompt_style=STYLE_CONTINUE)
QUESTION = "hello there"


@pytest.fixture
def runner() -> InlineRunner:
    return InlineRunner()


@pytest.fixture
def chat(runner: InlineRunner, varied_model_dir: Path) -> Iterator[Chat]:
    chat = chat_on(runner, EngineHost(), InlineRunner())
    assert chat.backend_session.open_model(varied_model_dir, threads=1)
    runner.drain()
    assert chat.state is State.READY
    yield chat
    chat.backend_session.host.engine = None


def ask(served: Served, text: str, **extra: Any) -> dict[str, Any]:
    body = {"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": NEW}
    response = httpx2.post(
        f"{served.api}/chat/completions", json={**body, **extra}, timeout=120, trust_env=False
    )
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def answer_in_window(chat: Chat, runner: InlineRunner, options: GenerationOptions) -> None:
    assert chat.send(QUESTION, options)
    runner.drain()
    assert chat.state is State.READY


def templated(engine: Engine, text: str) -> int:
    return len(engine.tokenizer.chat_ids([Message("user", text)]))


def continued(engine: Engine, text: str) -> int:
    return len(engine.tokenizer.chat_ids([Message("user", text)], style=STYLE_CONTINUE))


def test_serving_the_window_s_model_renders_api_requests_with_the_template_while_its_chat_continues_text(  # noqa: E501
    chat: Chat, runner: InlineRunner
) -> None:
    engine = chat.backend_session.host.engine
    assert engine is not None and engine.tokenizer.has_template
    assert templated(engine, QUESTION) != continued(engine, QUESTION)  # the styles differ here
    answer_in_window(chat, runner, CONTINUE)  # the chat's last answer continued text
    assert chat.context is not None
    assert chat.context.prompt_tokens == continued(engine, QUESTION)

    with serving(engine) as served:  # Serve this model: the window's own Engine
        data = ask(served, QUESTION)
    assert data["usage"]["prompt_tokens"] == templated(engine, QUESTION)

    # ... and the chat's next answer still continues text: nothing was switched for it either.
    chat.new_chat()
    answer_in_window(chat, runner, CONTINUE)
    assert chat.context is not None
    assert chat.context.prompt_tokens == continued(engine, QUESTION)


def test_the_window_serve_and_generate_give_the_same_tokens_for_the_same_request(
    chat: Chat, runner: InlineRunner, varied_model_dir: Path
) -> None:
    engine = chat.backend_session.host.engine
    assert engine is not None
    answer_in_window(chat, runner, CONTINUE)  # a style the next requests must not inherit
    chat.new_chat()
    answer_in_window(chat, runner, CHAT)
    figures = chat.conversation.messages[-1].figures
    assert figures is not None and figures.generated_tokens == NEW
    # The window's tokens: its job for the same chat (the one Chat submits) gives the
    # ids, and the same text as the chat's answer.
    result = drive(window_job(chat.backend_session.host, (Message("user", QUESTION),), CHAT)).result
    ids = result.stats.token_ids
    assert len(ids) == NEW and result.text == chat.conversation.messages[-1].content
    # ... and the same job on the engine service's thread, as the window's JobRunner runs it.
    heard, service = Heard(), EngineService("test-window")
    try:
        service.submit(
            window_job(chat.backend_session.host, (Message("user", QUESTION),), CHAT), heard
        )
        assert heard.done.wait(300)
    finally:
        assert service.close(300)
    kind, on_service = heard.events[-1]
    assert kind == "finished" and on_service.stats.token_ids == ids

    with serving(engine) as served:
        data = ask(served, QUESTION, logprobs=True)
    served_tokens = [t["token"] for t in data["choices"][0]["logprobs"]["content"]]
    as_served = TokenText(engine.tokenizer.tok)
    assert served_tokens == [as_served(i)[0] for i in ids]

    args = ["--model", str(varied_model_dir), "--prompt", QUESTION, "--greedy", "--json"]
    args += ["--threads", "1", "--repetition-penalty", "1", "--max-new-tokens", str(NEW)]
    out = subprocess.run(
        [sys.executable, "-m", "chatapp", "generate", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["token_ids"] == ids


def test_four_slots_render_their_requests_while_the_chat_renders_text_continuation(
    varied_model_dir: Path,
) -> None:
    engine = Engine(varied_model_dir, threads=1, max_context=256)
    questions = ["hello", "tell me about the sea", "hi", "what is a word"]
    expected = {q: templated(engine, q) for q in questions}
    done = threading.Event()
    chat_prompts: set[int] = set()

    def chat_renders() -> None:  # the window measuring its chat meanwhile (continued text)
        while not done.is_set():
            chat_prompts.add(continued(engine, QUESTION))

    with serving(engine, parallel=4) as served:
        window = threading.Thread(target=chat_renders, daemon=True)
        window.start()
        got: dict[str, int] = {}

        def one(question: str) -> None:
            got[question] = ask(served, question)["usage"]["prompt_tokens"]

        threads = [threading.Thread(target=one, args=(q,)) for q in questions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        done.set()
        window.join(30)
    assert got == expected
    assert chat_prompts == {continued(engine, QUESTION)}
