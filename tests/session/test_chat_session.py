"""The chat's state machine without Qt or threads: jobs run on InlineRunners (running.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.errors import DeviceFailure
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.session import chat_session
from chatapp.session.chat_jobs import StatsSnapshot, TokenBatch
from chatapp.session.chat_session import ChatObserver, ChatSession, GenerationOptions, State
from chatapp.session.context import ContextReport
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.jobs import Job, JobControl
from chatapp.session.model_jobs import ConvertRequest, EngineHost, ModelSummary, Progress
from chatapp.session.running import InlineRunner

GREEDY = GenerationOptions(
    SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8), Mode.IOBINDING
)


class Recorder(ChatObserver):
    """Every event, by name, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def of(self, name: str) -> list[Any]:
        return [value for n, value in self.events if n == name]

    def state_changed(self, state: State) -> None:
        self.events.append(("state", state))

    def model_loaded(self, summary: ModelSummary) -> None:
        self.events.append(("loaded", summary))

    def load_failed(self, message: str) -> None:
        self.events.append(("load_failed", message))

    def answer_started(self, options: GenerationOptions) -> None:
        self.events.append(("started", options))

    def answer_delta(self, batch: TokenBatch) -> None:
        self.events.append(("delta", batch))

    def stats(self, snapshot: StatsSnapshot) -> None:
        self.events.append(("stats", snapshot))

    def answer_finished(self, message: ChatMessage) -> None:
        self.events.append(("finished", message))

    def answer_failed(self, message: str, restored_prompt: str) -> None:
        self.events.append(("failed", (message, restored_prompt)))

    def conversation_changed(self, conversation: Conversation) -> None:
        self.events.append(("changed", conversation))

    def context(self, report: ContextReport | None) -> None:
        self.events.append(("context", report))

    def convert_progress(self, fraction: float, message: str) -> None:
        self.events.append(("convert_progress", (fraction, message)))

    def converted(self, folder: Path) -> None:
        self.events.append(("converted", folder))

    def convert_failed(self, message: str) -> None:
        self.events.append(("convert_failed", message))


@pytest.fixture
def engine_runner() -> InlineRunner:
    return InlineRunner()


@pytest.fixture
def tool_runner() -> InlineRunner:
    return InlineRunner()


@pytest.fixture
def session(engine_runner: InlineRunner, tool_runner: InlineRunner) -> Iterator[ChatSession]:
    chat = ChatSession(engine_runner, EngineHost(), tool_runner)
    yield chat
    chat.host.engine = None


@pytest.fixture
def loaded(session: ChatSession, engine_runner: InlineRunner, tiny_model_dir: Path) -> ChatSession:
    assert session.open_model(tiny_model_dir, threads=1)
    engine_runner.drain()
    assert session.state is State.READY
    return session


def test_a_load_then_an_answer_walk_the_states_and_tell_the_observers(
    session: ChatSession, engine_runner: InlineRunner, tiny_model_dir: Path
) -> None:
    seen = Recorder()
    session.subscribe(seen)
    assert session.open_model(tiny_model_dir, threads=1)
    assert session.state is State.LOADING and not session.send("hi", GREEDY)  # not yet
    engine_runner.drain()
    assert session.model is not None and session.backend is session.model
    assert session.send("  hello  ", GREEDY)
    assert session.state is State.GENERATING and session.busy
    assert not session.open_model(tiny_model_dir)  # one request at a time
    engine_runner.drain()

    assert [s for s in seen.of("state")] == [
        State.LOADING,
        State.READY,
        State.GENERATING,
        State.READY,
    ]
    assert seen.names()[:4] == ["state", "state", "loaded", "state"]
    deltas = seen.of("delta")
    (answer,) = seen.of("finished")
    assert deltas and "".join(d.text for d in deltas) == answer.content
    assert [m.role for m in session.conversation.messages] == ["user", "assistant"]
    assert session.conversation.messages[0].content == "hello"
    assert answer.figures is not None and answer.figures.mode == Mode.IOBINDING.value
    # The context report of the answer's own request, then the final figures, the answer,
    # and the conversation changed last (the history saves then).
    assert isinstance(session.context, ContextReport)
    assert seen.names()[-3:] == ["state", "finished", "changed"]
    assert engine_runner.names == ["model load", "generation"]


def test_a_failed_load_keeps_the_state_it_had(
    session: ChatSession, engine_runner: InlineRunner, tmp_path: Path
) -> None:
    seen = Recorder()
    session.subscribe(seen)
    assert session.open_model(tmp_path / "no-model-here")
    engine_runner.drain()
    assert session.state is State.NO_MODEL and session.model is None
    (message,) = seen.of("load_failed")
    assert message and "\n" not in message


def failing_generation(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def job(_host: EngineHost, *_request: object) -> Job:
        def run(_control: JobControl) -> None:
            raise error

        return Job("generation", run, lambda exc: f"Writing the answer failed: {exc}.")

    monkeypatch.setattr(chat_session, "window_job", job)


def test_an_answer_that_fails_at_once_gives_the_prompt_back(
    loaded: ChatSession, engine_runner: InlineRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_generation(monkeypatch, RuntimeError("the device went away"))
    seen = Recorder()
    loaded.subscribe(seen)
    assert loaded.send("what now?", GREEDY)
    engine_runner.drain()
    assert loaded.state is State.READY and loaded.conversation.messages == []
    assert seen.of("failed") == [("Writing the answer failed: the device went away.", "what now?")]


def test_a_regenerate_that_fails_keeps_the_old_answer_and_a_device_fault_reloads_on_cpu(
    loaded: ChatSession, engine_runner: InlineRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert loaded.send("hello", GREEDY)
    engine_runner.drain()
    old = loaded.conversation.messages[-1].content
    failing_generation(monkeypatch, DeviceFailure("CPU", OSError("gone")))
    seen = Recorder()
    loaded.subscribe(seen)
    assert loaded.regenerate(GREEDY)
    assert len(loaded.conversation.messages) == 1  # the old answer is out while regenerating
    engine_runner.drain()
    assert loaded.conversation.messages[1].content == old
    assert seen.of("failed")[0][1] == ""  # nothing to give back: the answer came back
    assert engine_runner.names[-1] == "CPU fallback"  # queued behind the failed answer
    assert seen.of("loaded") and loaded.state is State.READY


def test_stop_ends_the_answer_with_what_was_written(
    session: ChatSession, tiny_model_dir: Path
) -> None:
    runner = InlineRunner(stop_after=3)
    chat = ChatSession(runner, session.host)
    chat.open_model(tiny_model_dir, threads=1)
    runner.drain()
    chat.send("hello", GenerationOptions(SamplingSettings(max_new_tokens=200), Mode.NAIVE))
    runner.drain()
    answer = chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.figures is not None
    assert answer.figures.finish_reason == "stop" and answer.figures.generated_tokens < 200


def test_versions_edit_and_new_chat(loaded: ChatSession, engine_runner: InlineRunner) -> None:
    assert loaded.send("hello", GREEDY)
    engine_runner.drain()
    assert loaded.regenerate(GREEDY)
    engine_runner.drain()
    answer = loaded.conversation.messages[1]
    assert len(answer.others) == 1  # the first answer is kept as another version
    seen = Recorder()
    loaded.subscribe(seen)
    assert loaded.select_version(1, 0) and seen.names() == ["changed"]
    assert not loaded.select_version(5, 0)
    assert loaded.edit(0, "hello again", GREEDY)
    engine_runner.drain()
    assert loaded.conversation.messages[0].content == "hello again"
    assert loaded.new_chat() and loaded.conversation.messages == []
    assert loaded.context is None


def test_a_conversion_runs_on_the_tool_worker_not_the_engines(
    session: ChatSession,
    engine_runner: InlineRunner,
    tool_runner: InlineRunner,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    def fake_convert(request: ConvertRequest) -> Job:
        def run(control: JobControl) -> Path:
            control.put(Progress(0.5, "writing weights"))
            return request.out_dir

        return Job("conversion", run)

    monkeypatch.setattr(chat_session, "convert_job", fake_convert)
    seen = Recorder()
    session.subscribe(seen)
    assert session.convert_gguf(tmp_path / "m.gguf", tmp_path / "out")
    assert session.state is State.CONVERTING and not session.convert_gguf(tmp_path, tmp_path)
    assert engine_runner.queue == [] and len(tool_runner.queue) == 1
    tool_runner.drain()
    assert seen.of("convert_progress") == [(0.5, "writing weights")]
    assert seen.of("converted") == [tmp_path / "out"]
    assert session.state is State.NO_MODEL  # where it came from
