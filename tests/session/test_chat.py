"""The chat's state machine without Qt or threads: jobs run on InlineRunners (running.py)."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.errors import DeviceFailure
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.session import backend_session, chat
from chatapp.session.chat import Chat, GenerationOptions, State, chat_on
from chatapp.session.context import ContextReport
from chatapp.session.jobs import Job, JobControl
from chatapp.session.model_jobs import ConvertRequest, EngineHost, Progress
from chatapp.session.running import InlineRunner

GREEDY = GenerationOptions(
    SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8), Mode.IOBINDING
)


# The names the tests use for the events they check (warm_up, convert_planned and
# backend_changed are not recorded).
SHORT = {
    "state_changed": "state",
    "model_loaded": "loaded",
    "answer_started": "started",
    "answer_delta": "delta",
    "answer_finished": "finished",
    "answer_failed": "failed",
    "conversation_changed": "changed",
}
SKIPPED = {"warm_up", "convert_planned", "backend_changed"}


class Recorder:
    """Every event of a chat and its backend session, by name, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def attach(self, chat: Chat) -> None:
        for group in (chat.backend_session.events, chat.events):
            for event in group.events():
                if event.name not in SKIPPED:
                    event.connect(partial(self._record, SHORT.get(event.name, event.name)))

    def _record(self, name: str, *args: Any) -> None:
        self.events.append((name, args[0] if len(args) == 1 else args))

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def of(self, name: str) -> list[Any]:
        return [value for n, value in self.events if n == name]


@pytest.fixture
def engine_runner() -> InlineRunner:
    return InlineRunner()


@pytest.fixture
def tool_runner() -> InlineRunner:
    return InlineRunner()


@pytest.fixture
def session(engine_runner: InlineRunner, tool_runner: InlineRunner) -> Iterator[Chat]:
    chat = chat_on(engine_runner, EngineHost(), tool_runner)
    yield chat
    chat.backend_session.host.engine = None


@pytest.fixture
def loaded(session: Chat, engine_runner: InlineRunner, tiny_model_dir: Path) -> Chat:
    assert session.backend_session.open_model(tiny_model_dir, threads=1)
    engine_runner.drain()
    assert session.state is State.READY
    return session


def test_a_load_then_an_answer_walk_the_states_and_tell_the_observers(
    session: Chat, engine_runner: InlineRunner, tiny_model_dir: Path
) -> None:
    seen = Recorder()
    seen.attach(session)
    assert session.backend_session.open_model(tiny_model_dir, threads=1)
    assert session.state is State.LOADING and not session.send("hi", GREEDY)  # not yet
    engine_runner.drain()
    assert (
        session.backend_session.model is not None
        and session.backend is session.backend_session.model
    )
    assert session.send("  hello  ", GREEDY)
    assert session.state is State.GENERATING and session.backend_session.busy
    assert not session.backend_session.open_model(tiny_model_dir)  # one request at a time
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
    session: Chat, engine_runner: InlineRunner, tmp_path: Path
) -> None:
    seen = Recorder()
    seen.attach(session)
    assert session.backend_session.open_model(tmp_path / "no-model-here")
    engine_runner.drain()
    assert session.state is State.NO_MODEL and session.backend_session.model is None
    (message,) = seen.of("load_failed")
    assert message and "\n" not in message


def failing_generation(monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    def job(_host: EngineHost, *_request: object) -> Job:
        def run(_control: JobControl) -> None:
            raise error

        return Job("generation", run, lambda exc: f"Writing the answer failed: {exc}.")

    monkeypatch.setattr(chat, "window_job", job)


def test_an_answer_that_fails_at_once_gives_the_prompt_back(
    loaded: Chat, engine_runner: InlineRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_generation(monkeypatch, RuntimeError("the device went away"))
    seen = Recorder()
    seen.attach(loaded)
    assert loaded.send("what now?", GREEDY)
    engine_runner.drain()
    assert loaded.state is State.READY and loaded.conversation.messages == []
    assert seen.of("failed") == [("Writing the answer failed: the device went away.", "what now?")]


def test_a_regenerate_that_fails_keeps_the_old_answer_and_a_device_fault_reloads_on_cpu(
    loaded: Chat, engine_runner: InlineRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert loaded.send("hello", GREEDY)
    engine_runner.drain()
    old = loaded.conversation.messages[-1].content
    failing_generation(monkeypatch, DeviceFailure("CPU", OSError("gone")))
    seen = Recorder()
    seen.attach(loaded)
    assert loaded.regenerate(GREEDY)
    assert len(loaded.conversation.messages) == 1  # the old answer is out while regenerating
    engine_runner.drain()
    assert loaded.conversation.messages[1].content == old
    assert seen.of("failed")[0][1] == ""  # nothing to give back: the answer came back
    assert engine_runner.names[-1] == "CPU fallback"  # queued behind the failed answer
    assert seen.of("loaded") and loaded.state is State.READY


def test_stop_ends_the_answer_with_what_was_written(session: Chat, tiny_model_dir: Path) -> None:
    runner = InlineRunner(stop_after=3)
    chat = chat_on(runner, session.backend_session.host)
    chat.backend_session.open_model(tiny_model_dir, threads=1)
    runner.drain()
    chat.send("hello", GenerationOptions(SamplingSettings(max_new_tokens=200), Mode.NAIVE))
    runner.drain()
    answer = chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.figures is not None
    assert answer.figures.finish_reason == "stop" and answer.figures.generated_tokens < 200


def test_versions_edit_and_new_chat(loaded: Chat, engine_runner: InlineRunner) -> None:
    assert loaded.send("hello", GREEDY)
    engine_runner.drain()
    assert loaded.regenerate(GREEDY)
    engine_runner.drain()
    answer = loaded.conversation.messages[1]
    assert len(answer.others) == 1  # the first answer is kept as another version
    seen = Recorder()
    seen.attach(loaded)
    assert loaded.select_version(1, 0) and seen.names() == ["changed"]
    assert not loaded.select_version(5, 0)
    assert loaded.edit(0, "hello again", GREEDY)
    engine_runner.drain()
    assert loaded.conversation.messages[0].content == "hello again"
    assert loaded.new_chat() and loaded.conversation.messages == []
    assert loaded.context is None


def test_a_conversion_runs_on_the_tool_worker_not_the_engines(
    session: Chat,
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

    monkeypatch.setattr(backend_session, "convert_job", fake_convert)
    seen = Recorder()
    seen.attach(session)
    assert session.backend_session.convert_gguf(tmp_path / "m.gguf", tmp_path / "out")
    assert session.state is State.CONVERTING and not session.backend_session.convert_gguf(
        tmp_path, tmp_path
    )
    assert engine_runner.queue == [] and len(tool_runner.queue) == 1
    tool_runner.drain()
    assert seen.of("convert_progress") == [(0.5, "writing weights")]
    assert seen.of("converted") == [tmp_path / "out"]
    assert session.state is State.NO_MODEL  # where it came from
