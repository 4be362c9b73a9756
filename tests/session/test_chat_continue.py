"""Chat: Continue after the token limit, stop strings, text continuation for a base
model, and the model named on each answer (InlineRunner, the tiny models).

Expected texts are computed on the running machine (a first greedy answer), never stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import STYLE_CONTINUE, STYLE_PLAIN_CHAT, Message
from chatapp.session.answer import STOP_STRING
from chatapp.session.chat import Chat, GenerationOptions, State, chat_on
from chatapp.session.model_jobs import EngineHost
from chatapp.session.running import InlineRunner
from tests.session.test_chat import Recorder

SHORT = GenerationOptions(
    SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=4), Mode.IOBINDING
)


@pytest.fixture
def runner() -> InlineRunner:
    return InlineRunner()


def _open(runner: InlineRunner, folder: Path) -> Iterator[Chat]:
    chat = chat_on(runner, EngineHost(), InlineRunner())
    assert chat.backend_session.open_model(folder, threads=1)
    runner.drain()
    assert chat.state is State.READY
    yield chat
    chat.backend_session.host.engine = None


@pytest.fixture
def chat(runner: InlineRunner, varied_model_dir: Path) -> Iterator[Chat]:
    yield from _open(runner, varied_model_dir)


@pytest.fixture
def base(runner: InlineRunner, base_model_dir: Path) -> Iterator[Chat]:
    yield from _open(runner, base_model_dir)


def _answer(chat: Chat, runner: InlineRunner, text: str, options: GenerationOptions) -> str:
    assert chat.send(text, options)
    runner.drain()
    return chat.conversation.messages[-1].content


def test_continue_grows_the_answer_that_hit_the_token_limit(
    chat: Chat, runner: InlineRunner
) -> None:
    first = _answer(chat, runner, "hello", SHORT)
    cut = chat.conversation.messages[-1]
    if cut.figures is None or cut.figures.finish_reason != "length":
        pytest.skip("this machine's kernels ended the tiny model's answer early")
    assert chat.can_continue()
    seen = Recorder()
    seen.attach(chat)
    assert chat.continue_answer(SHORT)
    runner.drain()
    messages = chat.conversation.messages
    assert [m.role for m in messages] == ["user", "assistant"]  # the same answer, longer
    grown = messages[-1]
    assert grown.content.startswith(first) and len(grown.content) > len(first)
    assert grown.figures is not None
    assert grown.figures.generated_tokens > cut.figures.generated_tokens
    # The transcript saw the answer so far first, then the new tokens after it.
    assert "".join(d.text for d in seen.of("delta")) == grown.content
    assert grown.version_count == 1


def test_continue_needs_an_answer_cut_at_the_limit(chat: Chat, runner: InlineRunner) -> None:
    assert not chat.can_continue() and not chat.continue_answer(SHORT)  # no answer yet
    _answer(chat, runner, "hello", SHORT)
    last = chat.conversation.messages[-1]
    assert last.figures is not None
    last.figures = replace(last.figures, finish_reason="eos")
    assert not chat.continue_answer(SHORT)


def test_a_stop_string_ends_the_answer_before_it(chat: Chat, runner: InlineRunner) -> None:
    long = replace(SHORT, settings=replace(SHORT.settings, max_new_tokens=24))
    free = _answer(chat, runner, "hello", long)
    stop = free[len(free) // 2 :][:3]
    if len(free) < 6 or not stop.strip():
        pytest.skip("the tiny model's answer on this machine is too short to cut")
    assert chat.new_chat()
    stopped = _answer(chat, runner, "hello", replace(long, stops=(stop,)))
    assert stopped == free[: free.index(stop)]
    figures = chat.conversation.messages[-1].figures
    assert figures is not None and figures.finish_reason == STOP_STRING


def test_a_base_model_continues_the_text_and_answers_name_their_model(
    base: Chat, runner: InlineRunner
) -> None:
    engine = base.backend_session.host.engine
    assert engine is not None and base.backend_session.model is not None
    assert not base.backend_session.model.has_chat_template
    options = replace(SHORT, prompt_style=STYLE_CONTINUE)
    _answer(base, runner, "The capital of France is", options)
    assert base.context is not None
    # The prompt was the text alone: no "User:" scaffolding to count.
    assert base.context.prompt_tokens == len(
        engine.tokenizer.with_bos(engine.tokenizer.encode("The capital of France is"))
    )
    answer = base.conversation.messages[-1]
    assert answer.figures is not None and answer.figures.model == base.backend_session.model.name
    # Chat as plain lines: the style follows the request.
    base.new_chat()
    _answer(base, runner, "Hi", replace(SHORT, prompt_style=STYLE_PLAIN_CHAT))
    assert base.context is not None
    plain = engine.tokenizer.chat_ids([Message("user", "Hi")], style=STYLE_PLAIN_CHAT)
    assert base.context.prompt_tokens == len(plain)


def test_the_context_is_measured_as_the_prompt_will_be_sent(
    base: Chat, runner: InlineRunner
) -> None:
    engine = base.backend_session.host.engine
    assert engine is not None
    question = "The capital of France is"
    answer = _answer(base, runner, question, replace(SHORT, prompt_style=STYLE_CONTINUE))
    tok = engine.tokenizer
    # A reopened chat is measured with the style it will be sent in: here the question and
    # the answer as one text.
    assert base.measure_context(replace(SHORT, prompt_style=STYLE_CONTINUE))
    runner.drain()
    assert base.context is not None
    as_text = base.context.prompt_tokens
    assert as_text == len(tok.with_bos(tok.encode(question + answer)))
    # As plain chat lines the same messages take more tokens ("User: ", "Assistant:").
    assert base.measure_context(replace(SHORT, prompt_style=STYLE_PLAIN_CHAT))
    runner.drain()
    assert base.context.prompt_tokens > as_text
