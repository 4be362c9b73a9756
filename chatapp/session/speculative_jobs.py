"""Plain against speculative decoding on one prompt, for the window's "Plain vs speculative"
view (gui/compare/speculative_view.py). No Qt.

The job answers the prompt greedily, plain and with drafting in turn (who leads alternates
between repeats, each from an empty KV cache, as `chatapp bench --speculative` does), yields
each answer's per-token costs as it ends, and returns the prompt's result with the sentences
that describe it and the machine's load (engine/bench/speculative.py).
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from chatapp.engine.bench.run import LoadStart
from chatapp.engine.bench.speculative import (
    PromptResult,
    SpeculativeBench,
    add_run,
    speculative_lines,
    speculative_runs,
)
from chatapp.engine.errors import EngineError
from chatapp.engine.text.chat import Message
from chatapp.session.jobs import Job, JobAborted, JobControl, failed
from chatapp.session.model_jobs import EngineHost

STOPPED = "Plain against speculative stopped."


@dataclass(frozen=True)
class SpeculativeRequest:
    prompt: str
    max_new_tokens: int = 128
    repeats: int = 3


@dataclass(frozen=True)
class AnswerCosts:
    """One answer of the runs: its per-token latencies (ms, tokens after the first), in order."""

    drafts: bool
    repeat: int
    latencies_ms: tuple[float, ...]
    tokens_per_s: float
    tokens_per_pass: float


@dataclass(frozen=True)
class SpeculativeCompared:
    bench: SpeculativeBench
    lines: tuple[str, ...]  # the table and sentences, true of `bench`

    @property
    def result(self) -> PromptResult:
        return self.bench.results[0]


def speculative_compare_job(host: EngineHost, request: SpeculativeRequest) -> Job:
    def run(control: JobControl) -> Generator[object, None, SpeculativeCompared]:
        engine = host.require()
        refusal = engine.speculation_refusal()
        if refusal:
            raise EngineError(f"Speculative decoding does not run on this model: {refusal}.")
        tok = engine.tokenizer
        if tok.has_template:
            ids = tok.chat_ids([Message("user", request.prompt)], engine.max_context)
        else:  # a base model continues the text, as its chat does
            ids = tok.with_bos(tok.encode_text(request.prompt))
        result = PromptResult("this prompt", "asked")
        start = LoadStart.now()  # the view says the load and warns when busy, as the bench
        firsts: dict[int, list[int]] = {}
        repeats = max(1, request.repeats)
        runs = speculative_runs(
            engine, [ids], request.max_new_tokens, repeats, lambda: control.stopped
        )
        for done in runs:
            if control.stopped:
                raise JobAborted(STOPPED)
            firsts[done.repeat] = add_run(result, done, firsts.get(done.repeat))
            stats = done.stats
            passes = max(1, stats.runs)
            yield AnswerCosts(
                done.drafts,
                done.repeat,
                tuple(s * 1000 for s in stats.latencies_s),
                stats.tokens_per_s,
                len(stats.latencies_s) / passes if stats.latencies_s else 1.0,
            )
            control.flush()
        bench = SpeculativeBench(
            engine.info.name,
            engine.precision_in_effect,
            None,
            repeats,
            [result],
            load_average=start.record(engine.threads),
            threads=engine.threads,
        )
        return SpeculativeCompared(bench, tuple(speculative_lines(bench)))

    return Job(
        "plain against speculative",
        run,
        lambda exc: failed("Plain against speculative", exc),
        (EngineError,),
    )
