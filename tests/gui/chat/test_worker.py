"""GenerationWorker in its own thread, driven over queued signals like the controller does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QObject, Signal

from chatapp.engine.chat import Message
from chatapp.engine.engine import Engine
from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.chat.worker import (
    AnswerResult,
    GenerateRequest,
    GenerationFailure,
    LoadRequest,
    ModelSummary,
    TokenBatch,
    WorkerThread,
)
from chatapp.gui.common.qtcompat import emit

GREEDY_LONG = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=300)


class Requests(QObject):
    sig_load = Signal(object)
    sig_generate = Signal(object)


@pytest.fixture
def worker_thread(qtbot) -> Iterator[tuple[WorkerThread, Requests]]:
    wt = WorkerThread()
    requests = Requests()
    requests.sig_load.connect(wt.worker.load)
    requests.sig_generate.connect(wt.worker.generate)
    yield wt, requests
    assert wt.stop()


def _load(qtbot, wt: WorkerThread, requests: Requests, folder: Path) -> ModelSummary:
    with qtbot.waitSignal(wt.worker.sig_model_loaded, timeout=60_000) as blocker:
        emit(requests.sig_load, LoadRequest(folder))
    return blocker.args[0]


def _generate(qtbot, wt, requests, rid: int, settings=GREEDY_LONG, text="hello"):
    batches: list[TokenBatch] = []
    wt.worker.sig_token.connect(batches.append)
    try:
        with qtbot.waitSignal(wt.worker.sig_finished, timeout=60_000) as blocker:
            emit(
                requests.sig_generate,
                GenerateRequest(rid, (Message("user", text),), settings, "iobinding"),
            )
    finally:
        wt.worker.sig_token.disconnect(batches.append)
    result: AnswerResult = blocker.args[0]
    return result, batches


def test_worker_batches_a_fast_token_stream(qtbot, worker_thread, tiny_model_dir) -> None:
    wt, requests = worker_thread
    summary = _load(qtbot, wt, requests, tiny_model_dir)
    assert summary.device == "cpu" and summary.fallback_reason is None
    assert summary.max_context == 512
    result, batches = _generate(qtbot, wt, requests, 1)
    stats = result.stats
    assert stats.finish_reason == "length"
    assert stats.generated_tokens == 300
    # Every token arrives exactly once, in order, and the text adds up to the answer...
    ids = [t for b in batches for t in b.token_ids]
    assert ids == stats.token_ids
    assert [b.first_index for b in batches] == [
        sum(len(x.token_ids) for x in batches[:i]) for i in range(len(batches))
    ]
    assert "".join(b.text for b in batches) == result.text
    # ...but in few signals: the tiny model makes thousands of tokens per second.
    assert batches[0].token_ids and len(batches[0].token_ids) == 1  # TTFT is not delayed
    assert len(batches) < 60


def test_worker_stop_flag_is_read_between_steps(qtbot, worker_thread, tiny_model_dir) -> None:
    wt, requests = worker_thread
    _load(qtbot, wt, requests, tiny_model_dir)
    wt.worker.request_stop(7)  # before the request is even handled: no race possible
    result, _ = _generate(qtbot, wt, requests, 7)
    assert result.stats.finish_reason == "stop"
    assert result.stats.generated_tokens == 1
    result, _ = _generate(qtbot, wt, requests, 8)  # a later request is not stopped
    assert result.stats.finish_reason == "length"


def test_worker_reports_load_failure_and_keeps_going(
    qtbot, worker_thread, tiny_model_dir, tmp_path
) -> None:
    wt, requests = worker_thread
    with qtbot.waitSignal(wt.worker.sig_load_failed, timeout=30_000) as blocker:
        emit(requests.sig_load, LoadRequest(tmp_path / "no-such-model"))
    assert "no-such-model" in blocker.args[0]
    assert _load(qtbot, wt, requests, tiny_model_dir).name


def test_worker_exception_becomes_sig_error(
    qtbot, worker_thread, tiny_model_dir, monkeypatch
) -> None:
    wt, requests = worker_thread
    _load(qtbot, wt, requests, tiny_model_dir)

    def broken(*_args, **_kwargs):
        raise RuntimeError("simulated fault")

    monkeypatch.setattr(Engine, "chat", broken)
    with qtbot.waitSignal(wt.worker.sig_error, timeout=30_000) as blocker:
        emit(
            requests.sig_generate,
            GenerateRequest(1, (Message("user", "x"),), GREEDY_LONG, "iobinding"),
        )
    failure: GenerationFailure = blocker.args[0]
    assert failure.request_id == 1
    assert failure.message == "Generation failed: RuntimeError: simulated fault"
    assert failure.stats is None
    assert wt.thread.isRunning()


class _FakeGeneration:
    """Yields fixed deltas and, like the real detokenizer, adds a held-back tail at the end."""

    def __init__(self, deltas: list[str], tail: str) -> None:
        from chatapp.engine.metrics import RunStats

        self.deltas, self.tail = deltas, tail
        self.stats = RunStats(mode="iobinding", device="cpu", prompt_tokens=3)
        self.text = ""

    def __iter__(self):
        from chatapp.engine.generation import StepEvent
        from chatapp.engine.metrics import StepTiming

        for i, delta in enumerate(self.deltas):
            self.stats.token_ids.append(i)
            self.stats.logprobs.append(-0.5)
            self.text += delta
            yield StepEvent(i, i, delta, -0.5, StepTiming(0, 0, 0), 0.01)
        self.stats.finish_reason = "eos"
        self.text += self.tail


class _FakeEngine:
    max_context = 512

    def __init__(self, generation: _FakeGeneration) -> None:
        self.generation = generation

    def count_tokens(self, messages) -> int:  # the context policy counts before generating
        return 4 * len(messages)

    def chat(self, *_args, **_kwargs) -> _FakeGeneration:
        return self.generation


def test_unflushed_text_and_held_back_tail_arrive_exactly_once(qtbot) -> None:
    wt = WorkerThread()
    requests = Requests()
    requests.sig_generate.connect(wt.worker.generate)
    try:
        wt.worker.flush_interval_s = 60.0  # everything after the first token stays pending
        wt.worker.engine = _FakeEngine(_FakeGeneration(["The", " capital", " is", " Par"], "is."))
        batches: list[TokenBatch] = []
        wt.worker.sig_token.connect(batches.append)
        with qtbot.waitSignal(wt.worker.sig_finished, timeout=10_000) as blocker:
            emit(
                requests.sig_generate,
                GenerateRequest(1, (Message("user", "x"),), GREEDY_LONG, "iobinding"),
            )
        assert [b.text for b in batches] == ["The", " capital is Paris."]
        assert "".join(b.text for b in batches) == blocker.args[0].text
    finally:
        assert wt.stop()
