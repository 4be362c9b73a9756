"""The comparison view's sentences, computed from the runs on screen. No Qt.

Rules every sentence keeps (issue 29: a sentence that contradicted its own table):
- a figure is a median with its spread: the interquartile range of the values, or their whole
  range where there are fewer than MIN_FOR_QUARTILES of them (say 3 repeats);
- a ratio whose spread includes 1.0 is "no measurable difference", whatever its median;
- speeds are compared by the median time per token, per repeat and paired (the loops of one
  repeat ran in lockstep, under the same load), never by the mean-based tokens/s alone, which
  a few slow tokens pull (the mean is named where it disagrees);
- growth is claimed only where the data show it: the last part's spread lies wholly above the
  first part's and the values rise in order (SPEARMAN_MIN), else "no steady growth";
- every number quoted is one the table or the charts show, from the same functions.

Inputs have the shape of `chatapp bench --json` (bench_stats.summarize per loop).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chatapp.engine.modes import MODES, Mode
from chatapp.units import fmt_bytes

MIN_FOR_QUARTILES = 4  # fewer values: their range stands for the spread
MIN_STEPS_FOR_TREND = 8  # decode steps an answer needs before its growth is judged
SPEARMAN_MIN = 0.8  # rank correlation with position needed to call a series rising


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

    def text(self, unit: str = " ms", digits: int = 1) -> str:
        """'48.0 ms (46.1–50.3)'; one value alone has no spread to show."""
        value = f"{self.median:.{digits}f}{unit}"
        if self.count < 2:
            return value
        return f"{value} ({self.low:.{digits}f}–{self.high:.{digits}f})"


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
    value: float
    low: float
    high: float
    count: int  # repeats it comes from (1: from one run's per-token spreads)

    @property
    def measurable(self) -> bool:
        return not (self.low <= 1.0 <= self.high)

    def text(self) -> str:
        return f"{self.value:.2f}x ({self.low:.2f}–{self.high:.2f}x)"


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Ratio:
    """Per-repeat ratios, their median and spread."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True) if b > 0]
    s = spread_of(ratios)
    return Ratio(s.median, s.low, s.high, s.count)


def spread_ratio(a: Spread, b: Spread) -> Ratio:
    """a / b where each is one run's spread: as wide as the two spreads allow."""
    if b.median <= 0 or b.low <= 0:
        return Ratio(0.0, 0.0, 0.0, 0)
    return Ratio(a.median / b.median, a.low / b.high, a.high / b.low, 1)


def step_ms(summary: dict[str, Any]) -> list[float]:
    """The first run's time per decode token (ms): what the per-token chart draws."""
    return [x * 1000 for x in summary["first_run"]["latencies_s"]]


def per_token(summary: dict[str, Any]) -> Spread:
    return spread_of(step_ms(summary))


def loops_in(result: dict[str, Any]) -> list[Mode]:
    return [m for m in MODES if m in result]


def speed_ratio(faster: dict[str, Any], slower: dict[str, Any]) -> Ratio:
    """How many times `faster`'s speed `slower`'s is, from median time per token: per repeat
    where there are several, else from the one run's per-token spreads."""
    mine, theirs = faster.get("latency_p50_s_all"), slower.get("latency_p50_s_all")
    if mine and theirs and len(mine) == len(theirs) >= 2:
        return paired_ratio(theirs, mine)
    return spread_ratio(per_token(slower), per_token(faster))


def _rank(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    for rank, i in enumerate(order):
        ranks[i] = float(rank)
    return ranks


def spearman(values: Sequence[float]) -> float:
    """Rank correlation of the values with their order (1: always rising)."""
    n = len(values)
    if n < 3:
        return 0.0
    ranks = _rank(values)
    d2 = sum((r - i) ** 2 for i, r in enumerate(ranks))
    return 1 - 6 * d2 / (n * (n * n - 1))


def grows(spreads: Sequence[Spread]) -> bool:
    """Rising in order, and the last wholly above the first."""
    if len(spreads) < 2:
        return False
    rising = len(spreads) == 2 or spearman([s.median for s in spreads]) >= SPEARMAN_MIN
    return rising and spreads[-1].above(spreads[0])


def quarters(values: Sequence[float]) -> tuple[Spread, Spread]:
    """The spreads of the first and the last quarter of a series."""
    k = max(2, len(values) // 4)
    return spread_of(values[:k]), spread_of(values[-k:])


# ---- sentences ---------------------------------------------------------------------------
def comparison_sentences(result: dict[str, Any]) -> list[str]:
    """What one comparison shows, in words; every number from `result`."""
    loops = loops_in(result)
    if not loops:
        return []
    sentences = [
        f"Time per token, median of the first run ({_spread_kind(result, loops)}): "
        + ", ".join(f"{m.label} {per_token(result[m]).text()}" for m in loops)
        + "."
    ]
    if Mode.NAIVE in result and Mode.IOBINDING in result:
        sentences.append(_iobinding_sentence(result))
    if Mode.NOCACHE in result:
        sentences.append(_caching_sentence(result, loops))
    sentences += _growth_sentences(result, loops)
    return sentences


def _spread_kind(result: dict[str, Any], loops: list[Mode]) -> str:
    return per_token(result[loops[0]]).kind


def _runs(count: int) -> str:
    return f"over {count} runs" if count > 1 else "within one run"


def _iobinding_sentence(result: dict[str, Any]) -> str:
    naive, iob = result[Mode.NAIVE], result[Mode.IOBINDING]
    ratio = speed_ratio(iob, naive)
    spread = f"{ratio.low:.2f}–{ratio.high:.2f}x {_runs(ratio.count)}"
    if not ratio.measurable:
        text = f"IO-Binding against Naive: no measurable difference ({ratio.value:.2f}x, {spread})"
    else:
        which = "faster" if ratio.value > 1 else "slower"
        text = f"IO-Binding was {ratio.value:.2f}x Naive's speed ({which}; {spread})"
    mean = result.get("speedup_tokens_per_s")
    # Outside by more than the two decimals shown (equal-looking numbers are not a contrast).
    if mean and not ratio.low - 0.005 <= mean <= ratio.high + 0.005:
        text += (
            f"; the mean-based tokens/s ratio ({mean:.2f}x) lies outside that spread: "
            "a few slow tokens pull it"
        )
    return text + "."


def _caching_sentence(result: dict[str, Any], loops: list[Mode]) -> str:
    tokens = result.get("max_new_tokens", 0)
    nocache = result[Mode.NOCACHE]
    parts = []
    for mode in (m for m in loops if m.caches):
        ratio = _answer_ratio(nocache, result[mode])
        if ratio.measurable:
            parts.append(f"{ratio.value:.1f}x with {mode.label} ({_band(ratio)})")
        else:
            parts.append(f"no measurable difference with {mode.label} ({_band(ratio)})")
    return (
        f"Caching's speed-up over the whole {tokens}-token answer (first token included): "
        + ", ".join(parts)
        + "."
    )


def _band(ratio: Ratio) -> str:
    return f"{ratio.low:.1f}–{ratio.high:.1f}x {_runs(ratio.count)}"


def _answer_ratio(nocache: dict[str, Any], cached: dict[str, Any]) -> Ratio:
    mine, theirs = nocache.get("answer_s_all"), cached.get("answer_s_all")
    if mine and theirs and len(mine) == len(theirs):
        return paired_ratio(mine, theirs)
    value = nocache.get("answer_s", 0.0) / max(cached.get("answer_s", 0.0), 1e-12)
    return Ratio(value, value, value, 1)


def caching_speedup(result: dict[str, Any], mode: Mode) -> Ratio | None:
    """The figure the caching chart draws: no cache's answer time over `mode`'s."""
    if Mode.NOCACHE not in result or mode not in result:
        return None
    return _answer_ratio(result[Mode.NOCACHE], result[mode])


def _growth_sentences(result: dict[str, Any], loops: list[Mode]) -> list[str]:
    grew: list[tuple[Mode, Spread, Spread]] = []
    flat: list[tuple[Mode, Spread, Spread]] = []
    for mode in loops:
        steps = step_ms(result[mode])
        if len(steps) < MIN_STEPS_FOR_TREND:
            continue
        first, last = quarters(steps)
        rising = grows([first, last]) and spearman(_smoothed(steps)) >= SPEARMAN_MIN
        (grew if rising else flat).append((mode, first, last))
    sentences = []
    for mode, first, last in grew:
        sentences.append(
            f"{mode.label}: a token's cost grew along the answer, from {first.text()} in its "
            f"first quarter to {last.text()} in its last"
            + (" (each step re-reads the whole sequence)." if not mode.caches else ".")
        )
    if flat:
        labels = [m.label for m, _, _ in flat]
        names = ", ".join(labels[:-1]) + " and " + labels[-1] if len(labels) > 1 else labels[0]
        values = "; ".join(f"{m.label} {f.text()} → {s.text()}" for m, f, s in flat)
        sentences.append(
            f"{names}: no steady growth along the answer (first quarter → last: {values})."
        )
    return sentences


def _smoothed(values: Sequence[float], parts: int = 8) -> list[float]:
    """Medians of consecutive eighths: the trend without single spikes."""
    size = max(1, len(values) // parts)
    return [statistics.median(values[i : i + size]) for i in range(0, len(values), size)]


def sweep_sentences(points: Sequence[dict[str, Any]]) -> list[str]:
    """What a context sweep shows; nothing about a trend from fewer than three points."""
    if not points:
        return []
    contexts = [p["prompt_tokens"] for p in points]
    sentences = []
    for mode in (m for m in MODES if all(m in p for p in points)):
        spreads = [per_token(p[mode]) for p in points]
        values = ", ".join(f"{s.text()} at {c}" for s, c in zip(spreads, contexts, strict=True))
        verdict = (
            "grows with the context"
            if len(points) >= 3 and grows(spreads)
            else "no steady growth with the context"
        )
        sentences.append(f"{mode.label}, time per token: {values}: {verdict}.")
    if all(Mode.NAIVE in p and Mode.IOBINDING in p for p in points):
        ratios = [speed_ratio(p[Mode.IOBINDING], p[Mode.NAIVE]) for p in points]
        listed = ", ".join(
            f"{r.value:.2f}x at {c}" + ("" if r.measurable else " (no measurable difference)")
            for r, c in zip(ratios, contexts, strict=True)
        )
        as_spreads = [Spread(r.value, r.low, r.high, r.count) for r in ratios]
        verdict = (
            "it grows with the context"
            if len(points) >= 3 and grows(as_spreads)
            else "no steady growth with the context"
        )
        sentences.append(f"IO-Binding against Naive by context: {listed}; {verdict}.")
    return sentences


def moved_per_token(summary: dict[str, Any]) -> float:
    transfer = summary.get("transfer") or {}
    return float(transfer.get("h2d_bytes_per_token", 0) + transfer.get("d2h_bytes_per_token", 0))


def device_sentence(result: dict[str, Any]) -> str:
    """What crossed between host and device per token, as the table's rows show it."""
    loops = loops_in(result)
    device = result.get("device_label") or result.get("device") or "this device"
    if not result.get("device_own_memory"):
        return (
            f"On the {device} the model works in the host's memory: 0 bytes per token cross "
            "between host and device in any loop, so what caching saves here is compute."
        )
    moved = ", ".join(f"{m.label} {fmt_bytes(moved_per_token(result[m]))}" for m in loops)
    return f"On {device}, host↔device per token (both ways): {moved}."


def explanation(result: dict[str, Any] | None, sweep: Sequence[dict[str, Any]]) -> str:
    """The view's whole explanation: the comparison on screen, then its sweep; redone whenever
    either changes, so no sentence outlives the numbers it came from."""
    sentences: list[str] = []
    if result is not None and loops_in(result) and "first_run" in result[loops_in(result)[0]]:
        sentences += [*comparison_sentences(result), device_sentence(result)]
    sentences += sweep_sentences(sweep)
    return "\n".join(sentences)
