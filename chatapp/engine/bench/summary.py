"""One comparison's figures, computed once: what the table, the charts, the sentences and the
report all read (issue 36: sentences that contradicted the numbers beside them). No Qt.

One statistic everywhere: a loop's *time per token* is the median of its runs' median decode
step times (one run: that run's median step), with its spread: the range of the runs' medians
(fewer than MIN_FOR_QUARTILES runs) or their interquartile range; a single run's spread is its
tokens' interquartile range. A ratio divides two of these shown figures, in the direction a
reader expects (faster = above 1), and is called a difference only where the runs' own ratios
all lie on the same side of 1. A trend compares a first part with a last part (the first and
last quarter of an answer, the shortest and longest context) and is called only where the two
spreads do not overlap; otherwise the sentence says the data cannot tell.

Inputs have the shape of `chatapp bench --json` (bench.stats.summarize per loop).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from chatapp.engine.modes import MODES, Mode

MIN_FOR_QUARTILES = 4  # fewer values: their range stands for the spread
MIN_STEPS_FOR_TREND = 8  # decode steps an answer needs before its growth is judged
ONE_RUN_MARGIN = 0.10  # one run has no spread: only a ratio past 1 +- this is called
SHOWN = 0.005  # ratios show two decimals: a band must clear 1.00 as shown, not 1.001

Verdict = Literal["rose", "fell", "overlap", "too_few"]


@dataclass(frozen=True)
class Spread:
    """A median and the spread around it (quartiles, or the range of a few values)."""

    median: float
    low: float
    high: float
    count: int

    @property
    def kind(self) -> str:
        return "interquartile range" if self.count >= MIN_FOR_QUARTILES else "range"

    def above(self, other: Spread) -> bool:
        """Wholly above `other`: the two spreads do not overlap."""
        return self.low > other.high

    def scaled(self, factor: float) -> Spread:
        return Spread(self.median * factor, self.low * factor, self.high * factor, self.count)

    def text(self, unit: str = " ms") -> str:
        """'48.0 ms (46.1–50.3)'; one value alone has no spread to show."""
        digits = decimals(self.median)
        value = f"{self.median:.{digits}f}{unit}"
        if self.count < 2:
            return value
        return f"{value} ({self.low:.{digits}f}–{self.high:.{digits}f})"


def decimals(value: float) -> int:
    """Three significant figures, at least one decimal: 1564.3, 37.9, 2.68, 0.402."""
    size = abs(value)
    return 1 if size >= 10 else 2 if size >= 1 else 3


def fig(value: float) -> str:
    return f"{value:.{decimals(value)}f}"


def spread_of(values: Sequence[float]) -> Spread:
    data = sorted(float(v) for v in values)
    if not data:
        return Spread(0.0, 0.0, 0.0, 0)
    if len(data) < MIN_FOR_QUARTILES:
        return Spread(statistics.median(data), data[0], data[-1], len(data))
    q1, q2, q3 = statistics.quantiles(data, n=4, method="inclusive")
    return Spread(q2, q1, q3, len(data))


@dataclass(frozen=True)
class Ratio:
    """numerator / denominator: two figures as the table shows them; low-high is the spread of
    the runs' own ratios (paired: the loops of one run ran in lockstep), or, from one run, the
    widest ratio its tokens' spreads allow (per-token figures) or none (count 1)."""

    numerator: float
    denominator: float
    low: float
    high: float
    count: int  # runs the spread comes from (1: one run)

    @property
    def value(self) -> float:
        return self.numerator / self.denominator if self.denominator > 0 else 0.0

    @property
    def has_spread(self) -> bool:
        return self.high > self.low

    @property
    def measurable(self) -> bool:
        """A difference the data show: the spread wholly on the value's side of 1."""
        v = self.value
        if v <= 0:
            return False
        if not self.has_spread:
            return abs(v - 1.0) > ONE_RUN_MARGIN
        return (self.low > 1.0 + SHOWN and v > 1.0) or (self.high < 1.0 - SHOWN and v < 1.0)

    def band(self, digits: int = 2) -> str:
        return f"{self.low:.{digits}f}–{self.high:.{digits}f}x"


@dataclass(frozen=True)
class Trend:
    """A first part against a last part of a series, each with its spread."""

    first: Spread
    last: Spread
    verdict: Verdict


def trend(first: Spread, last: Spread, enough: bool = True) -> Trend:
    if not enough or first.count < 2 or last.count < 2:
        return Trend(first, last, "too_few")
    if last.above(first):
        return Trend(first, last, "rose")
    if first.above(last):
        return Trend(first, last, "fell")
    return Trend(first, last, "overlap")


def quarters(values: Sequence[float]) -> tuple[Spread, Spread]:
    """The spreads of the first and the last quarter of a series."""
    k = max(2, len(values) // 4)
    return spread_of(values[:k]), spread_of(values[-k:])


@dataclass(frozen=True)
class LoopFigures:
    mode: Mode
    per_token_ms: Spread  # the one statistic: median of the runs' medians, its spread
    answer_s: Spread  # the whole answer (first token included), over the runs
    tokens_per_s: float  # decode tokens / decode time (a mean), median over the runs
    tokens_per_s_all: tuple[float, ...]
    runs: int
    along: Trend  # the first run's first quarter against its last (the latency chart's line)
    steps: int  # decode steps of the first run


def step_ms(summary: dict[str, Any]) -> list[float]:
    """The first run's time per decode token (ms): what the per-token chart draws."""
    return [x * 1000 for x in summary["first_run"]["latencies_s"]]


def per_token_ms(summary: dict[str, Any]) -> Spread:
    """The median of the runs' median step times, and their spread (one run: its tokens')."""
    medians = [x * 1000 for x in summary.get("latency_p50_s_all") or []]
    if len(medians) >= 2:
        return spread_of(medians)
    return spread_of(step_ms(summary))


def loop_figures(mode: Mode, summary: dict[str, Any]) -> LoopFigures:
    steps = step_ms(summary)
    answers = summary.get("answer_s_all") or [summary.get("answer_s", 0.0)]
    speeds = tuple(summary.get("tokens_per_s_all") or [summary.get("tokens_per_s", 0.0)])
    first, last = quarters(steps) if steps else (spread_of([]), spread_of([]))
    return LoopFigures(
        mode=mode,
        per_token_ms=per_token_ms(summary),
        answer_s=spread_of(answers),
        tokens_per_s=statistics.median(speeds) if speeds else 0.0,
        tokens_per_s_all=speeds,
        runs=max(len(summary.get("latency_p50_s_all") or []), 1),
        along=trend(first, last, len(steps) >= MIN_STEPS_FOR_TREND),
        steps=len(steps),
    )


def _paired(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float]:
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True) if b > 0]
    return (min(ratios), max(ratios)) if ratios else (0.0, 0.0)


def _ratio_of(
    a: Spread, b: Spread, a_runs: list[float], b_runs: list[float], tokens_spread: bool
) -> Ratio:
    if len(a_runs) >= 2 and len(a_runs) == len(b_runs):
        low, high = _paired(a_runs, b_runs)
        return Ratio(a.median, b.median, low, high, len(a_runs))
    if tokens_spread and a.count >= 2 and b.low > 0:
        return Ratio(a.median, b.median, a.low / b.high, a.high / b.low, 1)
    value = a.median / b.median if b.median > 0 else 0.0
    return Ratio(a.median, b.median, value, value, 1)


@dataclass(frozen=True)
class ComparisonSummary:
    loops: dict[Mode, LoopFigures]
    io_vs_naive: Ratio | None  # Naive's time per token / IO-Binding's (above 1: IO-B. faster)
    io_vs_naive_speed: Ratio | None  # IO-Binding's tokens/s / Naive's (a mean-based figure)
    io_vs_naive_answer: Ratio | None  # Naive's whole answer / IO-Binding's (paired runs)
    caching: dict[Mode, Ratio]  # no cache's whole answer / each cached loop's
    max_new_tokens: int
    runs: int


def _run_list(summary: dict[str, Any], key: str, scale: float) -> list[float]:
    return [x * scale for x in summary.get(key) or []]


def summarize_comparison(result: dict[str, Any]) -> ComparisonSummary:
    """Every figure the comparison view and the report show, from a bench-format result."""
    loops = {m: loop_figures(m, result[m]) for m in MODES if m in result}
    p50 = {m: _run_list(result[m], "latency_p50_s_all", 1000) for m in loops}
    answers = {m: _run_list(result[m], "answer_s_all", 1) for m in loops}
    io_vs_naive = io_speed = io_answer = None
    if Mode.NAIVE in loops and Mode.IOBINDING in loops:
        naive, iob = loops[Mode.NAIVE], loops[Mode.IOBINDING]
        io_vs_naive = _ratio_of(
            naive.per_token_ms, iob.per_token_ms, p50[Mode.NAIVE], p50[Mode.IOBINDING], True
        )
        speeds = (list(iob.tokens_per_s_all), list(naive.tokens_per_s_all))
        low, high = _paired(*speeds) if len(speeds[0]) >= 2 else (0.0, 0.0)
        io_speed = Ratio(iob.tokens_per_s, naive.tokens_per_s, low, high, len(speeds[0]))
        io_answer = _ratio_of(
            naive.answer_s, iob.answer_s, answers[Mode.NAIVE], answers[Mode.IOBINDING], False
        )
    caching: dict[Mode, Ratio] = {}
    if Mode.NOCACHE in loops:
        nocache = loops[Mode.NOCACHE]
        for mode in (m for m in loops if m.caches):
            caching[mode] = _ratio_of(
                nocache.answer_s,
                loops[mode].answer_s,
                answers[Mode.NOCACHE],
                answers[mode],
                False,
            )
    runs = max((f.runs for f in loops.values()), default=1)
    return ComparisonSummary(
        loops,
        io_vs_naive,
        io_speed,
        io_answer,
        caching,
        int(result.get("max_new_tokens", 0)),
        runs,
    )


@dataclass(frozen=True)
class SweepSummary:
    contexts: list[int]
    per_token: dict[Mode, list[tuple[int, Spread]]]  # the loops each point ran, by context
    trends: dict[Mode, Trend]  # shortest context against longest
    ratios: list[tuple[int, Ratio]]  # IO-Binding against Naive at each context
    ratio_trend: Trend | None
    typed: dict[int, int] | None = None  # a context measured -> as typed, where they differ

    def at(self, context: int) -> str:
        """A context as measured, and as typed where the prompt came out longer or shorter
        (the sweep pads real text to about the length asked for)."""
        typed = (self.typed or {}).get(context)
        return f"{context}" if typed is None else f"{context} ({typed} typed)"


def summarize_sweep(points: Sequence[dict[str, Any]]) -> SweepSummary:
    contexts = [int(p["prompt_tokens"]) for p in points]
    per_token: dict[Mode, list[tuple[int, Spread]]] = {}
    for mode in MODES:
        series = [(int(p["prompt_tokens"]), per_token_ms(p[mode])) for p in points if mode in p]
        if series:
            per_token[mode] = series
    trends = {
        m: trend(s[0][1], s[-1][1], len(s) >= 2 and s[-1][0] > s[0][0])
        for m, s in per_token.items()
    }
    ratios = [
        (int(p["prompt_tokens"]), summarize_comparison(p).io_vs_naive)
        for p in points
        if Mode.NAIVE in p and Mode.IOBINDING in p
    ]
    kept = [(c, r) for c, r in ratios if r is not None]
    ratio_trend = None
    if kept:
        first, last = kept[0][1], kept[-1][1]
        ratio_trend = trend(_as_spread(first), _as_spread(last), len(kept) >= 2)
    typed = {
        int(p["prompt_tokens"]): int(p["context_tokens"])
        for p in points
        if "context_tokens" in p and int(p["context_tokens"]) != int(p["prompt_tokens"])
    }
    return SweepSummary(contexts, per_token, trends, kept, ratio_trend, typed)


def _as_spread(ratio: Ratio) -> Spread:
    """A ratio as a spread to compare (count 1 where it has none: nothing to tell)."""
    return Spread(ratio.value, ratio.low, ratio.high, 2 if ratio.has_spread else 1)
