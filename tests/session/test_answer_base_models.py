"""One base-model policy in session/answer.py (issue 47): a model without a chat template is
sent a chat as User: / Assistant: lines, and its answer ends where it starts a turn of its own,
alike in the window's job, a served request (HTTP) and `chatapp generate`. The tiny base model
never writes "\\nUser:" by itself, so a backend around it adds one to its second token's text:
each face must cut the answer there, and the answers must equal one another."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chatapp.cli import engine_cmds
from chatapp.cli.main import build_parser
from chatapp.engine.engine import Engine
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import PLAIN_CHAT_STOPS, STYLE_PLAIN_CHAT, Message
from chatapp.session import prompt_style as ps
from chatapp.session.chat_jobs import window_job
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.model_jobs import EngineHost
from tests.serving import serving
from tests.session.drive import drive

QUESTION = "What is the capital of France?"
INVENTED = "\nUser: and Italy?\nAssistant: Rome"
SETTINGS = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8)


class _Stream:
    """The engine's answer, its second token followed by a turn the model wrote itself."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @property
    def stats(self) -> Any:
        return self._stream.stats

    def __iter__(self) -> Iterator[Any]:
        for event in self._stream:
            yield replace(event, text=event.text + INVENTED) if event.index == 1 else event


class InventsTurns:
    """The tiny base model, as a base model that goes on with the dialogue by itself."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def chat(self, messages: Sequence[Message], *args: Any, **kwargs: Any) -> _Stream:
        return _Stream(self._engine.chat(messages, *args, **kwargs))


@pytest.fixture(scope="module")
def base(base_model_dir: Path) -> InventsTurns:
    engine = Engine(base_model_dir, threads=1)
    assert not engine.tokenizer.has_template
    return InventsTurns(engine)


def _whole(base: InventsTurns) -> str:
    """What the model writes with no stop at all (the reference the three cut)."""
    parts = [e.text for e in base.chat([Message("user", QUESTION)], SETTINGS)]
    text = "".join(parts)
    assert INVENTED in text
    return text


def test_the_window_serve_and_generate_stop_a_base_model_at_its_own_turn(
    base: InventsTurns, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _whole(base)
    expected = whole[: whole.index("\nUser:")]

    # The window, chatting with it (Prompt: Chat), as the prompt option sends it.
    style = ps.engine_style(ps.CHAT, has_chat_template=False)
    assert style == STYLE_PLAIN_CHAT
    host = EngineHost()
    host.engine = base  # type: ignore[assignment]
    options = GenerationOptions(
        SETTINGS, Mode.IOBINDING, stops=ps.answer_stops((), style), prompt_style=style
    )
    window = drive(window_job(host, (Message("user", QUESTION),), options))
    assert window.error is None, window.message
    assert window.result.text == expected

    # `chatapp serve`: an OpenAI request names no prompt style and no stop.
    with serving(base) as served:  # type: ignore[arg-type]
        body = {
            "messages": [{"role": "user", "content": QUESTION}],
            "temperature": 0,
            "max_tokens": SETTINGS.max_new_tokens,
        }
        response = httpx2.post(
            f"{served.api}/chat/completions", json=body, timeout=120, trust_env=False
        )
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["message"]["content"] == expected and choice["finish_reason"] == "stop"

    # `chatapp generate --greedy` (in this process, on the same backend), with its note.
    monkeypatch.setattr(engine_cmds, "start_engine", lambda _args: base)
    argv = ["generate", "--prompt", QUESTION, "--greedy", "--repetition-penalty", "1"]
    args: argparse.Namespace = build_parser().parse_args(
        [*argv, "--max-new-tokens", str(SETTINGS.max_new_tokens), "--json"]
    )
    run: Callable[[argparse.Namespace], int] = args.func
    assert run(args) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["text"] == expected
    assert "ends where the model starts a turn of its own" in out.err


def test_a_chat_model_keeps_only_the_stops_asked_for() -> None:
    """Plain-line stops belong to plain lines: a model's own template adds none."""
    assert ps.answer_stops(("END",), "template", has_chat_template=True) == ("END",)
    added = ps.answer_stops(("END",), "template", has_chat_template=False)
    assert added == ("END", *PLAIN_CHAT_STOPS)
