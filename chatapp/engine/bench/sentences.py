"""A comparison in words, every number from its summary (bench.summary): the comparison view,
`chatapp bench` and the exported report say the same. No Qt.

Each sentence states the figures it rests on, so a reader (and tests/engine/test_bench_sentences.py)
can check it against the table: a ratio gives the two numbers it divides, a trend its first and
last part with their spreads, and where the spreads overlap or there are too few points the
sentence says the data cannot tell, never the opposite of what the numbers show.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chatapp.engine.bench.summary import (
    ONE_RUN_MARGIN,
    SHOWN,
    ComparisonSummary,
    LoopFigures,
    Ratio,
    SweepSummary,
    Trend,
    fig,
    summarize_comparison,
    summarize_sweep,
)
from chatapp.engine.modes import Mode
from chatapp.units import fmt_bytes

IO_VS_NAIVE = "IO-Binding vs Naive"
NO_DIFFERENCE = "no measurable difference"
NO_GAIN = "no gain"  # a chart title's short "no measurable difference"


def comparison_sentences(summary: ComparisonSummary) -> list[str]:
    """What one comparison shows, in words."""
    if not summary.loops:
        return []
    sentences = [per_token_sentence(summary)]
    if summary.io_vs_naive is not None:
        sentences.append(io_sentence(summary.io_vs_naive))
    if summary.io_vs_naive_speed is not None and summary.io_vs_naive is not None:
        sentences.append(speed_sentence(summary.io_vs_naive_speed, summary.io_vs_naive))
    if summary.caching:
        sentences.append(caching_sentence(summary))
    sentences += [along_sentence(f) for f in summary.loops.values()]
    return sentences


def spread_words(runs: int, count: int) -> str:
    if runs >= 2:
        kind = "interquartile range" if count >= 4 else "range"
        return f"median of the {runs} runs' medians, their {kind} in brackets"
    return "median of one run's tokens, their interquartile range in brackets"


def per_token_sentence(summary: ComparisonSummary) -> str:
    first = next(iter(summary.loops.values()))
    figures = ", ".join(f"{m.label} {f.per_token_ms.text()}" for m, f in summary.loops.items())
    return f"Time per token ({spread_words(first.runs, first.per_token_ms.count)}): {figures}."


def _band_words(ratio: Ratio, digits: int = 2) -> str:
    if ratio.count >= 2:
        return f"the runs' ratios: {ratio.band(digits)}"
    if ratio.has_spread:
        return f"one run's token spreads allow {ratio.band(digits)}"
    return f"one run, no spread: a difference under {ONE_RUN_MARGIN:.0%} is not called"


def verdict(ratio: Ratio, subject: str) -> str:
    """', IO-Binding faster (the runs' ratios: …)' or ', within the spread (…): no …'."""
    if ratio.measurable:
        which = "faster" if ratio.value > 1 else "slower"
        return f", {subject} {which} ({_band_words(ratio)})"
    return f", within the spread ({_band_words(ratio)}): {NO_DIFFERENCE}"


def io_sentence(ratio: Ratio) -> str:
    """IO-Binding vs Naive as the table's ratio column says it: Naive's time / IO-Binding's."""
    return (
        f"{IO_VS_NAIVE}: Naive's {fig(ratio.numerator)} / IO-Binding's {fig(ratio.denominator)} "
        f"ms per token = {ratio.value:.2f}x{verdict(ratio, 'IO-Binding')}."
    )


def speed_sentence(speed: Ratio, by_median: Ratio) -> str:
    """tokens/s, a mean; named where it would point elsewhere than the medians."""
    text = (
        f"By tokens/s (decode tokens ÷ decode time, a mean): IO-Binding's {fig(speed.numerator)} "
        f"/ Naive's {fig(speed.denominator)} = {speed.value:.2f}x"
    )
    text += verdict(speed, "IO-Binding")
    if opposite(speed.value, by_median.value):
        text += "; it points the other way from the medians because a few slow tokens pull a mean"
    return text + "."


def ratio_cell(ratio: Ratio, top: str, bottom: str) -> str:
    """A table's ratio with the numbers it divides, its spread and the rule's verdict (above
    1: IO-Binding faster): 'Naive 37.9 / IO-Binding 38.7 = 0.98x, within the spread (…): no
    measurable difference'."""
    text = f"{top}{fig(ratio.numerator)} / {bottom}{fig(ratio.denominator)} = {ratio.value:.2f}x"
    return text + verdict(ratio, "IO-Binding")


def opposite(a: float, b: float) -> bool:
    """One ratio above 1.00 and the other below, as two decimals show them."""
    return (a > 1 + SHOWN and b < 1 - SHOWN) or (a < 1 - SHOWN and b > 1 + SHOWN)


def caching_sentence(summary: ComparisonSummary) -> str:
    nocache = summary.loops[Mode.NOCACHE]
    parts = [
        f"No cache {fig(nocache.answer_s.median)} s / {mode.label} "
        f"{fig(summary.loops[mode].answer_s.median)} s = {ratio.value:.2f}x"
        + verdict(ratio, mode.label)
        for mode, ratio in summary.caching.items()
    ]
    return (
        f"Caching, the whole {summary.max_new_tokens}-token answer (first token included): "
        + "; ".join(parts)
        + "."
    )


def caching_title(summary: ComparisonSummary) -> str:
    """The whole-answer chart's title: each cached loop's own figure, never one for both."""
    tokens = summary.max_new_tokens
    if not summary.caching:
        return f"Whole answer, {tokens} tokens"
    parts = [
        f"{m.label} {r.value:.2f}x" if r.measurable else f"{m.label} {NO_GAIN}"
        for m, r in summary.caching.items()
    ]
    return f"{tokens} tokens, caching: " + ", ".join(parts)


def trend_words(t: Trend, first: str, last: str) -> str:
    if t.verdict == "rose":
        return f"higher {last} than {first}, the two spreads do not overlap"
    if t.verdict == "fell":
        return f"lower {last} than {first}, the two spreads do not overlap"
    if t.verdict == "overlap":
        return "the two spreads overlap, so the data cannot tell a change from noise"
    return "too few points to tell"


def along_sentence(figures: LoopFigures) -> str:
    label = figures.mode.label
    t = figures.along
    if t.verdict == "too_few":
        return f"{label} along the answer: {figures.steps} tokens, too few to tell a trend."
    why = " (each step re-reads the whole sequence)" if t.verdict == "rose" else ""
    why = why if not figures.mode.caches else ""
    return (
        f"{label} along the answer (first run): {t.first.text()} in the first quarter, "
        f"{t.last.text()} in the last: "
        + trend_words(t, "in the first quarter", "in the last")
        + why
        + "."
    )


def sweep_sentences(summary: SweepSummary) -> list[str]:
    """What a context sweep shows, loop by loop, then IO-Binding against Naive by context."""
    sentences = []
    for mode, series in summary.per_token.items():
        at = summary.at
        values = ", ".join(f"{s.text()} at {at(c)}" for c, s in series)
        t = summary.trends[mode]
        if len(series) < 2:
            verdict_text = "one context only, no trend to tell"
        else:
            verdict_text = trend_words(t, f"at {series[0][0]}", f"at {series[-1][0]}")
        sentences.append(f"{mode.label}, time per token by context: {values}: {verdict_text}.")
    if summary.ratios:
        listed = ", ".join(
            f"{fig(r.numerator)} / {fig(r.denominator)} ms = {r.value:.2f}x "
            f"({r.band() if r.has_spread else 'no spread'}"
            + ("" if r.measurable else f"; {NO_DIFFERENCE}")
            + f") at {summary.at(c)}"
            for c, r in summary.ratios
        )
        by_context = summary.ratio_trend
        if len(summary.ratios) < 2 or by_context is None:
            tail = "one context only, no trend to tell"
        else:
            first, last = summary.ratios[0][0], summary.ratios[-1][0]
            words = trend_words(by_context, f"at {first}", f"at {last}")
            tail = f"the ratio is {words}" if by_context.verdict in ("rose", "fell") else words
        sentences.append(
            f"{IO_VS_NAIVE} by context (Naive's time per token / IO-Binding's): {listed}; {tail}."
        )
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


def loops_in(result: dict[str, Any]) -> list[Mode]:
    return [m for m in Mode if m in result]


def explanation(result: dict[str, Any] | None, sweep: Sequence[dict[str, Any]]) -> str:
    """The whole explanation: the comparison, then its sweep; redone whenever either changes,
    so no sentence outlives the numbers it came from."""
    sentences: list[str] = []
    loops = loops_in(result) if result is not None else []
    if result is not None and loops and "first_run" in result[loops[0]]:
        sentences += [*comparison_sentences(summarize_comparison(result)), device_sentence(result)]
    if sweep:
        sentences += sweep_sentences(summarize_sweep(sweep))
    return "\n".join(sentences)
