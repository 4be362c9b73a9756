"""The loops on one prompt, and the context sweep, for the comparison view. No Qt.

The comparison job yields Progress lines, one StepFigures per decode step of each loop (the
loops run in lockstep, one token each in turn, so a busy machine slows them alike) and a
LoopFinished per loop; it returns CompareFinished. The loop without a cache is optional (its
time per token grows with the length); in a sweep it runs only up to NOCACHE_SWEEP_MAX tokens
of context, where one of its tokens costs about a prompt of that length. The sweep yields
SweepPoints and returns SweepFinished. Results have the shape of `chatapp bench --json`, so
the view's Export writes the same report as `chatapp bench --report`.

A sweep's time is estimated before its points start (issue 36: the default took over 35
minutes, its estimate came late and stood still): a warm-up on the first context measures this
machine's prefill per prompt token and its decode step, a cost model (SweepCosts) turns them
into seconds per point and per step, and the progress moves step by step on that model, so the
time left follows what was measured.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from chatapp.engine.bench.run import (
    Runs,
    bench_prompt_ids,
    interleaved,
    loop_pair,
    result_header,
    run_interleaved,
)
from chatapp.engine.bench.stats import compare_runs, summarize
from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats
from chatapp.engine.modes import MODES, Mode
from chatapp.engine.nocache import SEQUENCE_CAP
from chatapp.engine.text.chat import Message
from chatapp.session.jobs import Job, JobAborted, JobControl, failed
from chatapp.session.model_jobs import EngineHost

WARMUP_TOKENS = 4
# The charts redraw once per batch of steps. On a 2-core machine every redraw takes CPU from
# the loops being measured: 30 ms batches (the chat's) cost them ~20% of their tokens/s.
CHART_FLUSH_S = 0.25
# No cache re-reads the whole sequence for every token: one of its tokens at 512 tokens of
# context cost 4-5 s on 2 busy cores (SmolLM2-135M), so a sweep runs it only this far.
NOCACHE_SWEEP_MAX = 256
SWEEP_TOKENS = 16  # tokens per loop at each point: enough for a median and its quartiles
SWEEP_REPEATS = 1
DEFAULT_SWEEP = (128, 512, 1024)  # about 1-2 minutes for SmolLM2-135M on 2 cores
WARMUP_SWEEP_TOKENS = 4
COMPARISON_STOPPED = "Comparison stopped."
SWEEP_STOPPED = "Sweep stopped."


@dataclass(frozen=True)
class CompareRequest:
    prompt: str
    system_prompt: str = ""
    max_new_tokens: int = 64
    repeats: int = 3  # the first streams live; medians and min-max come from all of them
    modes: tuple[Mode, ...] = MODES


@dataclass(frozen=True)
class SweepRequest:
    prompt: str
    contexts: tuple[int, ...] = DEFAULT_SWEEP
    max_new_tokens: int = SWEEP_TOKENS
    repeats: int = SWEEP_REPEATS
    modes: tuple[Mode, ...] = MODES

    def modes_at(self, context_tokens: int) -> tuple[Mode, ...]:
        """The loops a point runs: no cache only where its steps stay affordable."""
        if context_tokens + self.max_new_tokens <= min(NOCACHE_SWEEP_MAX, SEQUENCE_CAP):
            return self.modes
        return tuple(m for m in self.modes if m.caches) or self.modes

    def nocache_note(self) -> str:
        """Where No cache runs in this sweep and why not elsewhere, for the view to show as it
        is ("": it runs at every context, or not at all)."""
        if Mode.NOCACHE not in self.modes:
            return ""
        runs = [c for c in self.contexts if Mode.NOCACHE in self.modes_at(c)]
        if len(runs) == len(self.contexts):
            return ""
        where = f"at {', '.join(map(str, runs))} only" if runs else "at none of these contexts"
        return (
            f"No cache runs {where}: past {NOCACHE_SWEEP_MAX} tokens (the context and the "
            f"{self.max_new_tokens} new ones) each of its tokens re-reads the whole sequence, "
            "seconds a token."
        )


@dataclass(frozen=True)
class SweepCosts:
    """This machine's speed, measured: a prompt token's share of a prefill and a cached decode
    step (seconds). What a sweep will take follows from them (a linear model: attention's
    growth with the context is small beside the weights at these lengths, and the progress
    corrects the rest as it goes)."""

    prefill_s_per_token: float
    decode_s: float

    def step_s(self, mode: Mode, context: int, index: int) -> float:
        """One step of a loop: the first token is a prefill; no cache's every token is one."""
        if index == 0 or not mode.caches:
            return self.prefill_s_per_token * (context + index)
        return self.decode_s

    def point_s(self, request: SweepRequest, context: int) -> float:
        steps = range(request.max_new_tokens)
        each = sum(self.step_s(m, context, i) for m in request.modes_at(context) for i in steps)
        return each * max(1, request.repeats)

    def sweep_s(self, request: SweepRequest) -> float:
        return sum(self.point_s(request, c) for c in request.contexts)

    @classmethod
    def from_run(cls, stats: RunStats) -> SweepCosts:
        decode = sorted(stats.latencies_s)
        return cls(
            stats.ttft_s / max(1, stats.prompt_tokens),
            decode[len(decode) // 2] if decode else stats.ttft_s,
        )


def duration_text(seconds: float) -> str:
    """'about 40 s', 'about 2 min 30 s', 'about 12 min'."""
    if seconds < 60:
        return f"about {max(5, round(seconds / 5) * 5):.0f} s"
    minutes, rest = divmod(round(seconds / 10) * 10, 60)
    if minutes >= 10:
        return f"about {round(seconds / 60)} min"
    return f"about {minutes:.0f} min" + (f" {rest:.0f} s" if rest else "")


@dataclass(frozen=True)
class ProgressLine:
    text: str
    fraction: float | None = None  # of the whole job done, 0..1, when known


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
class LoopFinished:
    loop: str
    summary: dict[str, Any]  # bench.stats.summarize() of this loop's run


@dataclass(frozen=True)
class CompareFinished:
    result: dict[str, Any]  # the same shape as `chatapp bench --json`


@dataclass(frozen=True)
class SweepPoint:
    context_tokens: int
    point: dict[str, Any]  # bench.stats.compare_runs() at this context


@dataclass(frozen=True)
class SweepFinished:
    header: dict[str, Any]  # bench.result_header(): model, device, environment...


def compare_job(host: EngineHost, request: CompareRequest) -> Job:
    def run(control: JobControl) -> Generator[object, None, CompareFinished]:
        engine = host.require()
        messages = [Message("system", request.system_prompt)] if request.system_prompt else []
        # Bounded: a prompt (or system prompt) longer than the context is refused before it
        # is tokenized whole (ContextOverflowError says so in words).
        ids = engine.tokenizer.chat_ids(
            [*messages, Message("user", request.prompt)], engine.max_context
        )
        modes = request.modes
        # A context of its own (its own KV): the chat's cached prompt stays. Plain, whatever
        # the chat drafts: this measures the loops, as `chatapp bench` (a kept draft would be a
        # 0 ms token in the medians); Plain vs speculative is its own view.
        runner = engine.loaded.new_context()
        yield ProgressLine(f"Warming up {_loops(modes)}…", 0.0)
        control.flush()
        run_interleaved(runner, ids, WARMUP_TOKENS, modes=modes)
        repeats = max(1, request.repeats)
        yield ProgressLine(f"Run 1/{repeats}: {_loops(modes)}, one token each in turn…", 0.0)
        first = yield from _run_streaming(runner, ids, request.max_new_tokens, control, modes)
        runs: dict[str, list[RunStats]] = {m: [first[m]] for m in modes}
        for r in range(2, repeats + 1):
            yield ProgressLine(f"Run {r}/{repeats} (the one above was run 1)…", (r - 1) / repeats)
            control.flush()
            # Who leads alternates, as in `chatapp bench`; the bar (and the time left) move
            # with every step, not only between runs (issue 47: "about 2 min left" stood still
            # from 15% to 66%).
            gens = loop_pair(runner, ids, request.max_new_tokens, lambda: control.stopped, modes)
            steps = request.max_new_tokens * len(modes)
            led = modes[(r - 1) % len(modes)]
            done = 0
            for _mode, event in interleaved(gens, led):
                done += not event.tail  # a tail is held-back text, not a step
                yield ProgressLine("", min((r - 1 + done / steps) / repeats, 0.999))
            more = {m: g.stats for m, g in gens.items()}
            if any(s.finish_reason == "stop" for s in more.values()):
                raise JobAborted(COMPARISON_STOPPED)
            for mode in modes:
                runs[mode].append(more[mode])
        for mode in modes:
            yield LoopFinished(mode, summarize(runs[mode]))
        header = result_header(engine, request.max_new_tokens, repeats=repeats)
        return CompareFinished({**header, **compare_runs(runs, len(ids))})

    return Job(
        "comparison",
        run,
        lambda exc: _explain("comparison", exc),
        (EngineError,),
        flush_interval_s=CHART_FLUSH_S,
    )


def _loops(modes: tuple[Mode, ...]) -> str:
    return "both loops" if len(modes) == 2 else f"the {len(modes)} loops"


def _run_streaming(
    runner: Runs, ids: list[int], n: int, control: JobControl, modes: tuple[Mode, ...]
) -> Generator[StepFigures, None, dict[str, RunStats]]:
    """The loops in lockstep (fair on a busy machine), yielding each decode step's figures."""
    gens = loop_pair(runner, ids, n, should_stop=lambda: control.stopped, modes=modes)
    for mode, event in interleaved(gens):
        if event.index > 0 and not event.tail:
            t = event.timing
            yield StepFigures(
                mode,
                event.index,
                event.latency_s * 1000,
                t.run_s * 1000,
                t.host_s * 1000,
                t.sample_s * 1000,
            )
    if any(g.stats.finish_reason == "stop" for g in gens.values()):
        raise JobAborted(COMPARISON_STOPPED)
    return {m: g.stats for m, g in gens.items()}


def sweep_job(host: EngineHost, request: SweepRequest) -> Job:
    def run(control: JobControl) -> Generator[object, None, SweepFinished]:
        engine = host.require()
        repeats = max(1, request.repeats)
        fits = [c for c in request.contexts if c + request.max_new_tokens < engine.max_context]
        yield ProgressLine("Measuring this machine's speed for the estimate…", 0.0)
        control.flush()
        # The warm-up is the measurement: the cached loops on the first context.
        first = bench_prompt_ids(engine, request.prompt, fits[0] if fits else None)
        cached = tuple(m for m in request.modes if m.caches) or request.modes
        # A context of its own (its own KV), plain as the comparison's (above).
        runner = engine.loaded.new_context()
        warm = run_interleaved(runner, first, WARMUP_SWEEP_TOKENS, modes=cached)
        costs = SweepCosts.from_run(warm[cached[-1]])
        total = costs.sweep_s(request) or 1.0
        done = 0.0
        yield ProgressLine(
            f"Context sweep: {len(request.contexts)} contexts, {request.max_new_tokens} tokens "
            f"per loop; estimated {duration_text(total)} on this machine.",
            0.0,
        )
        for number, target in enumerate(request.contexts, start=1):
            if target not in fits:
                done += costs.point_s(request, target)
                yield ProgressLine(
                    f"Context {target}: longer than the model's context.", done / total
                )
                continue
            ids = bench_prompt_ids(engine, request.prompt, target)
            if len(ids) + request.max_new_tokens >= engine.max_context:
                done += costs.point_s(request, target)
                yield ProgressLine(
                    f"Context {target}: longer than the model's context.", done / total
                )
                continue
            if control.stopped:
                raise JobAborted(SWEEP_STOPPED)
            modes = request.modes_at(target)
            runs: dict[str, list[RunStats]] = {m: [] for m in modes}
            left_out = (
                " (no cache left out: past "
                f"{NOCACHE_SWEEP_MAX} tokens each of its tokens costs a long prompt)"
                if set(request.modes) - set(modes)
                else ""
            )
            for r in range(repeats):
                run_text = f", run {r + 1}/{repeats}" if repeats > 1 else ""
                yield ProgressLine(
                    f"Context {target} ({number}/{len(request.contexts)}{run_text}), "
                    f"estimated {duration_text(total)} in all…{left_out}",
                    done / total,
                )
                control.flush()
                gens = loop_pair(
                    runner,
                    ids,
                    request.max_new_tokens,
                    should_stop=lambda: control.stopped,
                    modes=modes,
                )
                # Step by step: the bar (and the time left) move with every token.
                for mode, event in interleaved(gens, modes[r % len(modes)]):
                    done += costs.step_s(Mode(mode), len(ids), event.index)
                    yield ProgressLine("", min(done / total, 0.999))
                if any(g.stats.finish_reason == "stop" for g in gens.values()):
                    raise JobAborted(SWEEP_STOPPED)
                for mode in modes:
                    runs[mode].append(gens[mode].stats)
            yield SweepPoint(target, {**compare_runs(runs, len(ids)), "context_tokens": target})
            control.flush()
        return SweepFinished(result_header(engine, request.max_new_tokens, request.repeats))

    return Job(
        "sweep",
        run,
        lambda exc: _explain("sweep", exc),
        (EngineError,),
        flush_interval_s=CHART_FLUSH_S,
    )


def _explain(what: str, exc: BaseException) -> str:
    return str(exc) if isinstance(exc, EngineError) else failed(f"The {what}", exc)
