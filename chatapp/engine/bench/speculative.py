"""`chatapp bench --speculative`: plain decoding against speculative decoding on the same
prompts (chatapp/resources/speculative_prompts.json), greedy, in one process, interleaved.

Each repeat runs every prompt plain and speculative, the order alternating between repeats,
each from an empty KV cache; the figure is decode tokens/s (the first token excluded, as the
side panel counts it), and the ratio is the median of the per-repeat ratios. Both runs of a
prompt must give the same tokens: a verifying run computes the rows a one-token step would.
The planner keeps what it learnt between prompts, as it does between the answers of a chat.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from chatapp.engine.bench.summary import SHOWN
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine

PROMPTS_RESOURCE = "speculative_prompts.json"
KIND_LABELS = {"grounded": "Prompts that quote their own text", "open": "Open-ended prompts"}


@dataclass(frozen=True)
class BenchPrompt:
    name: str
    kind: str  # grounded: the answer can quote the prompt; open: open-ended chat
    chat: str
    continuation: str


def bench_prompts() -> list[BenchPrompt]:
    raw = resources.files("chatapp.resources").joinpath(PROMPTS_RESOURCE).read_text("utf-8")
    return [
        BenchPrompt(p["name"], p["kind"], p["chat"], p["continue"])
        for p in json.loads(raw)["prompts"]
    ]


@dataclass
class PromptResult:
    name: str
    kind: str
    plain_tps: list[float] = field(default_factory=list)
    speculative_tps: list[float] = field(default_factory=list)
    tokens: int = 0
    runs: int = 0  # the speculative answer's forward passes after the first token
    drafted: int = 0
    accepted: int = 0
    same_tokens: bool = True

    @property
    def ratios(self) -> list[float]:
        """Per repeat: speculative / plain decode tokens/s."""
        return [s / p for s, p in zip(self.speculative_tps, self.plain_tps, strict=False) if p]

    @property
    def ratio(self) -> float:
        """Median over repeats of speculative / plain decode tokens/s."""
        ratios = self.ratios
        return statistics.median(ratios) if ratios else 0.0

    @property
    def tokens_per_run(self) -> float:
        return (self.tokens - 1) / self.runs if self.runs else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "tokens_per_run": self.tokens_per_run}


@dataclass(frozen=True)
class SpeculativeBench:
    model: str
    precision: str | None
    refusal: str | None
    repeats: int
    results: list[PromptResult]

    def median_ratio(self, kind: str) -> float:
        ratios = [r.ratio for r in self.results if r.kind == kind]
        return statistics.median(ratios) if ratios else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "precision": self.precision,
            "refusal": self.refusal,
            "repeats": self.repeats,
            "grounded_ratio": self.median_ratio("grounded"),
            "open_ratio": self.median_ratio("open"),
            "prompts": [r.to_dict() for r in self.results],
        }


def prompt_ids(engine: Engine, prompt: BenchPrompt) -> list[int]:
    """The chat form through the template; a model without one continues the text form."""
    tok = engine.tokenizer
    if tok.has_template:
        return tok.chat_ids([Message("user", prompt.chat)], engine.max_context)
    return tok.with_bos(tok.encode_text(prompt.continuation))


def answer_once(
    engine: Engine,
    ids: list[int],
    settings: SamplingSettings,
    drafts: bool,
    should_stop: Callable[[], bool] | None = None,
) -> RunStats:
    """One greedy answer from an empty KV cache, plain or with drafting; the engine's own
    choice (the window's) is left as it was."""
    chosen, engine.speculative = engine.speculative, drafts
    engine.reset()
    try:
        return engine.generate_ids(ids, settings, should_stop=should_stop).run()
    finally:
        engine.speculative = chosen


@dataclass(frozen=True)
class SpeculativeRun:
    """One answer of the interleaved runs: which prompt and repeat, plain or drafted."""

    prompt: int  # index into the prompts
    repeat: int
    drafts: bool
    stats: RunStats


def speculative_runs(
    engine: Engine,
    prompts: list[list[int]],
    new_tokens: int,
    repeats: int,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[SpeculativeRun]:
    """Every prompt plain and speculative in each repeat, who leads alternating; first one
    drafted answer the planner times its runs with (not yielded)."""
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=new_tokens)
    answer_once(engine, prompts[0], settings, True, should_stop)
    for repeat in range(repeats):
        for index, ids in enumerate(prompts):
            for drafts in (False, True) if repeat % 2 == 0 else (True, False):
                stats = answer_once(engine, ids, settings, drafts, should_stop)
                yield SpeculativeRun(index, repeat, drafts, stats)


def add_run(result: PromptResult, run: SpeculativeRun, plain: list[int] | None) -> list[int]:
    """Fold one run into its prompt's result; returns the plain tokens to compare with."""
    stats = run.stats
    if not run.drafts:
        result.plain_tps.append(stats.tokens_per_s)
    else:
        result.speculative_tps.append(stats.tokens_per_s)
        result.tokens = stats.generated_tokens
        result.runs, result.drafted = stats.runs, stats.drafted_tokens
        result.accepted = stats.accepted_tokens
    if plain is None:
        return stats.token_ids
    result.same_tokens &= plain == stats.token_ids
    return plain


def measure_speculative(
    engine: Engine, new_tokens: int, repeats: int, prompts: list[BenchPrompt] | None = None
) -> SpeculativeBench:
    prompts = prompts or bench_prompts()
    results = [PromptResult(p.name, p.kind) for p in prompts]
    encoded = [prompt_ids(engine, p) for p in prompts]
    firsts: dict[tuple[int, int], list[int]] = {}
    for run in speculative_runs(engine, encoded, new_tokens, repeats):
        key = (run.prompt, run.repeat)
        firsts[key] = add_run(results[run.prompt], run, firsts.get(key))
    return SpeculativeBench(
        engine.info.name, engine.precision_in_effect, engine.speculation_refusal(), repeats, results
    )


def speculative_lines(bench: SpeculativeBench) -> list[str]:
    """The table and the sentences, each true of the numbers beside it."""
    if bench.refusal:
        return [f"Speculative decoding does not run on {bench.model}: {bench.refusal}."]
    lines = [
        f"{bench.model}, greedy, {bench.repeats} interleaved repeats "
        "(decode tokens/s, medians; ratio: median of the per-repeat ratios)",
        f"{'prompt':40} {'kind':8} {'plain':>7} {'spec.':>7} {'ratio':>6} "
        f"{'tok/run':>7} {'kept':>9} same",
    ]
    for r in bench.results:
        kept = f"{r.accepted}/{r.drafted}"
        lines.append(
            f"{r.name[:40]:40} {r.kind:8} {statistics.median(r.plain_tps):7.1f} "
            f"{statistics.median(r.speculative_tps):7.1f} {r.ratio:5.2f}x "
            f"{r.tokens_per_run:7.2f} {kept:>9} {'yes' if r.same_tokens else 'NO'}"
        )
    kinds = dict.fromkeys(r.kind for r in bench.results)
    for kind in kinds:
        of_kind = [r for r in bench.results if r.kind == kind]
        label = KIND_LABELS.get(kind, "This prompt" if len(of_kind) == 1 else "These prompts")
        lines.append(f"{label}: {_verdict(of_kind)}")
    if not all(r.same_tokens for r in bench.results):
        lines.append("Some answers differed from the plain decode's: that is a bug.")
    return lines


def _verdict(results: list[PromptResult]) -> str:
    """A sentence about the prompts' median ratio with its range (one prompt: its repeats'):
    faster or slower only where every ratio is on that side of 1 (by more than a shown
    rounding)."""
    if len(results) == 1:
        ratios, whose = results[0].ratios, "the repeats'"
    else:
        ratios, whose = [r.ratio for r in results], "the prompts'"
    if not ratios:
        return "nothing was measured."
    low, high = min(ratios), max(ratios)
    median = statistics.median(ratios)
    spread = f"{whose} ratios {low:.2f}-{high:.2f}x" if len(ratios) > 1 else "one run"
    figure = f"{median:.2f}x the plain decode's tokens/s ({spread})"
    if low > 1.0 + SHOWN:
        return f"speculative decoding was faster, {figure}."
    if high < 1.0 - SHOWN:
        return f"speculative decoding was slower, {figure}."
    return f"no difference the runs can tell: {figure}."
