"""Runs both loops on one prompt (and the context sweep) for the comparison view.

A QObject living in the generation worker's thread: it uses that worker's Engine, and because
both objects share the thread, a comparison and a chat answer never run at the same time.
Per-token figures go out in batches (at most one signal every 30 ms), like the chat's tokens.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from chatapp.engine.bench import (
    bench_prompt_ids,
    interleaved,
    loop_pair,
    result_header,
    run_interleaved,
)
from chatapp.engine.bench_stats import compare_runs, summarize
from chatapp.engine.chat import Message
from chatapp.engine.engine import MODES, Engine
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.gui.chat.worker import GenerationWorker
from chatapp.gui.common.qtcompat import emit

FLUSH_INTERVAL_S = 0.03
WARMUP_TOKENS = 4
perf = time.perf_counter


@dataclass(frozen=True)
class CompareRequest:
    request_id: int
    prompt: str
    system_prompt: str = ""
    max_new_tokens: int = 64
    repeats: int = 3  # the first streams live; medians and min-max come from all of them


@dataclass(frozen=True)
class SweepRequest:
    request_id: int
    prompt: str
    contexts: tuple[int, ...]
    max_new_tokens: int = 32
    repeats: int = 1


@dataclass(frozen=True)
class StepFigures:
    """One decode step of one loop, in milliseconds (index 1 = the second token)."""

    loop: str
    index: int
    latency_ms: float
    run_ms: float
    host_ms: float
    sample_ms: float


@dataclass(frozen=True)
class StepBatch:
    request_id: int
    steps: tuple[StepFigures, ...]


@dataclass(frozen=True)
class LoopFinished:
    request_id: int
    loop: str
    summary: dict[str, Any]  # bench.summarize() of this loop's run


@dataclass(frozen=True)
class CompareFinished:
    request_id: int
    result: dict[str, Any]  # the same shape as `chatapp bench --json`


@dataclass(frozen=True)
class SweepPoint:
    request_id: int
    context_tokens: int
    point: dict[str, Any]  # bench.compare_runs() at this context


@dataclass(frozen=True)
class SweepFinished:
    request_id: int
    header: dict[str, Any]  # bench.result_header(): model, device, environment...


@dataclass
class _Pending:
    steps: list[StepFigures] = field(default_factory=list)
    last_flush: float = 0.0


class CompareWorker(QObject):
    sig_progress = Signal(str)
    sig_steps = Signal(object)  # StepBatch
    sig_loop_finished = Signal(object)  # LoopFinished
    sig_finished = Signal(object)  # CompareFinished
    sig_sweep_point = Signal(object)  # SweepPoint
    sig_sweep_finished = Signal(object)  # SweepFinished
    sig_failed = Signal(int, str)  # request id, message (also for a stopped run)

    def __init__(self, source: GenerationWorker) -> None:
        super().__init__()
        self.source = source
        self._stop_through = 0

    def request_stop(self, request_id: int) -> None:
        """Called from the GUI thread; read between steps."""
        self._stop_through = max(self._stop_through, request_id)

    def _engine(self, rid: int) -> Engine | None:
        if self.source.engine is None:
            emit(self.sig_failed, rid, "No model is loaded yet.")
        return self.source.engine

    def _stopped(self, rid: int) -> bool:
        return self._stop_through >= rid

    def _guarded(self, rid: int, what: str, body: Callable[[Engine], None]) -> None:
        """Run `body` with the engine; every failure becomes a sig_failed sentence."""
        engine = self._engine(rid)
        if engine is None:
            return
        try:
            body(engine)
        except EngineError as exc:
            emit(self.sig_failed, rid, str(exc))
        except Exception as exc:
            traceback.print_exc()
            emit(self.sig_failed, rid, f"The {what} failed: {type(exc).__name__}: {exc}")

    @Slot(object)
    def compare(self, request: CompareRequest) -> None:
        self._guarded(request.request_id, "comparison", lambda e: self._compare(e, request))

    def _compare(self, engine: Engine, request: CompareRequest) -> None:
        rid = request.request_id
        messages = [Message("system", request.system_prompt)] if request.system_prompt else []
        ids = engine.tokenizer.chat_ids([*messages, Message("user", request.prompt)])
        emit(self.sig_progress, "Warming up both loops…")
        run_interleaved(engine, ids, WARMUP_TOKENS)
        repeats = max(1, request.repeats)
        emit(self.sig_progress, f"Run 1/{repeats}: both loops, one token each in turn…")
        first = self._run_streaming(engine, ids, request.max_new_tokens, rid)
        if first is None:
            emit(self.sig_failed, rid, "Comparison stopped.")
            return
        runs = {m: [first[m]] for m in MODES}
        for r in range(2, repeats + 1):
            emit(self.sig_progress, f"Run {r}/{repeats} (the one above was run 1)…")
            # Who leads alternates, as in `chatapp bench`.
            more = run_interleaved(
                engine,
                ids,
                request.max_new_tokens,
                MODES[(r - 1) % len(MODES)],
                should_stop=lambda: self._stopped(rid),
            )
            if any(s.finish_reason == "stop" for s in more.values()):
                emit(self.sig_failed, rid, "Comparison stopped.")
                return
            for mode in MODES:
                runs[mode].append(more[mode])
        for mode in MODES:
            emit(self.sig_loop_finished, LoopFinished(rid, mode, summarize(runs[mode])))
        header = result_header(engine, request.max_new_tokens, repeats=repeats)
        result = {**header, **compare_runs(runs, len(ids))}
        emit(self.sig_finished, CompareFinished(rid, result))
        emit(self.sig_progress, "Done.")

    def _run_streaming(
        self, engine: Engine, ids: list[int], n: int, rid: int
    ) -> dict[str, RunStats] | None:
        """Both loops in lockstep (fair on a busy machine), streaming each step's figures."""
        gens = loop_pair(engine, ids, n, should_stop=lambda: self._stopped(rid))
        pending = _Pending()
        for mode, event in interleaved(gens):
            if event.index > 0:
                t = event.timing
                pending.steps.append(
                    StepFigures(
                        mode,
                        event.index,
                        event.latency_s * 1000,
                        t.run_s * 1000,
                        t.host_s * 1000,
                        t.sample_s * 1000,
                    )
                )
            now = perf()
            if pending.steps and now - pending.last_flush >= FLUSH_INTERVAL_S:
                self._flush(rid, pending, now)
        self._flush(rid, pending, perf())
        if any(g.stats.finish_reason == "stop" for g in gens.values()):
            return None
        return {m: g.stats for m, g in gens.items()}

    def _flush(self, rid: int, pending: _Pending, now: float) -> None:
        if pending.steps:
            emit(self.sig_steps, StepBatch(rid, tuple(pending.steps)))
            pending.steps = []
        pending.last_flush = now

    @Slot(object)
    def sweep(self, request: SweepRequest) -> None:
        self._guarded(request.request_id, "sweep", lambda e: self._sweep(e, request))

    def _sweep(self, engine: Engine, request: SweepRequest) -> None:
        rid = request.request_id
        for number, target in enumerate(request.contexts, start=1):
            ids = bench_prompt_ids(engine, request.prompt, target)
            if len(ids) + request.max_new_tokens >= engine.max_context:
                emit(self.sig_progress, f"Context {target}: longer than the model's context.")
                continue
            if self._stopped(rid):
                emit(self.sig_failed, rid, "Sweep stopped.")
                return
            emit(self.sig_progress, f"Context {target} ({number}/{len(request.contexts)})…")
            runs: dict[str, list[RunStats]] = {m: [] for m in MODES}
            for r in range(max(1, request.repeats)):
                stats = run_interleaved(
                    engine,
                    ids,
                    request.max_new_tokens,
                    MODES[r % len(MODES)],
                    should_stop=lambda: self._stopped(rid),
                )
                if any(s.finish_reason == "stop" for s in stats.values()):
                    emit(self.sig_failed, rid, "Sweep stopped.")
                    return
                for mode in MODES:
                    runs[mode].append(stats[mode])
            point = {**compare_runs(runs, len(ids)), "context_tokens": target}
            emit(self.sig_sweep_point, SweepPoint(rid, target, point))
        header = result_header(engine, request.max_new_tokens, repeats=request.repeats)
        emit(self.sig_sweep_finished, SweepFinished(rid, header))
        emit(self.sig_progress, "Sweep done.")
