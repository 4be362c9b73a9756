"""Every sentence the comparison view (and `chatapp bench`'s report) can write, checked against
the numbers of a corpus of recorded runs (issue 36).

The runs are synthetic RunStats with set time-per-token series, put through the real
`compare_runs` as `chatapp bench` and the view do; the shapes include the issue's: cached loops
that grow along the answer (32 -> 48 ms), a no-cache sweep of two points (1564 ms at 130, 4989 ms
at 513), noisy flat runs, two or three points only, identical loops, and a ratio whose mean and
median point opposite ways (Naive 37.9 ms, IO-Binding 38.7 ms, tokens/s favouring IO-Binding).
Each sentence is parsed, its numbers recomputed here with numpy from the raw series (not with
the code under test), and its claim checked against them: a "faster" needs every run's ratio
above 1, a "higher" needs the spreads apart, and "cannot tell" is said only where they are not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chatapp.engine.bench.sentences import explanation
from chatapp.engine.bench.stats import compare_runs
from chatapp.engine.metrics import RunStats, StepTiming
from chatapp.engine.modes import Mode

RNG = np.random.default_rng(36)
LABELS = {"No cache": Mode.NOCACHE, "Naive": Mode.NAIVE, "IO-Binding": Mode.IOBINDING}
LOOP = r"(No cache|Naive|IO-Binding)"
NUM = r"(\d+(?:\.\d+)?)"
SPREAD = rf"{NUM} ms(?: \({NUM}–{NUM}\))?"
SHOWN = 0.005  # a ratio is called only where its band clears 1 by what two decimals show

Runs = dict[Mode, list[list[float]]]  # each loop's runs, each a time-per-token series in ms


def stats(mode: Mode, ms: list[float], ttft_ms: float) -> RunStats:
    return RunStats(
        mode,
        "cpu",
        prompt_tokens=20,
        ttft_s=ttft_ms / 1000,
        steps=[StepTiming(0.0, x / 1000, 0.0) for x in ms],
        latencies_s=[x / 1000 for x in ms],
        token_ids=list(range(len(ms) + 1)),
        finish_reason="length",
    )


@dataclass
class Recorded:
    runs: Runs
    ttft_ms: dict[Mode, float] = field(default_factory=dict)

    def result(self, context: int = 20) -> dict[str, Any]:
        recorded = {
            m: [stats(m, r, self.ttft_ms.get(m, 100.0)) for r in rs] for m, rs in self.runs.items()
        }
        tokens = len(next(iter(self.runs.values()))[0]) + 1
        point = compare_runs(recorded, context)
        return {"max_new_tokens": tokens, "device": "cpu", **point, "context_tokens": context}


def noisy(level: float, n: int, sd: float) -> list[float]:
    return [max(0.5, float(x)) for x in level + RNG.normal(0, sd, n)]


def ramp(start: float, end: float, n: int, sd: float) -> list[float]:
    return [max(0.5, float(x)) for x in np.linspace(start, end, n) + RNG.normal(0, sd, n)]


def with_stalls(values: list[float], every: int, stall: float) -> list[float]:
    return [stall if i % every == every - 1 else v for i, v in enumerate(values)]


def corpus() -> dict[str, Recorded]:
    n = 64
    same = [noisy(40.0, 32, 2.0) for _ in range(3)]
    nocache_same = [noisy(12.0, 16, 0.5) for _ in range(3)]
    return {
        # The issue: Naive 32.1 -> 48.3 ms, IO-Binding 32.9 -> 47.9 ms along the answer.
        "growing cached loops": Recorded(
            {
                Mode.NOCACHE: [ramp(100, 420, n, 4) for _ in range(3)],
                Mode.NAIVE: [ramp(32.1, 48.3, n, 1.0) for _ in range(3)],
                Mode.IOBINDING: [ramp(32.9, 47.9, n, 1.0) for _ in range(3)],
            },
            {Mode.NOCACHE: 300.0},
        ),
        # The issue: Naive 37.9 ms, IO-Binding 38.7 ms per token, a mean favouring IO-Binding.
        "reversed ratios": Recorded(
            {
                Mode.NAIVE: [with_stalls(noisy(37.9 + d, n, 0.3), 8, 400.0) for d in (0, 0.2, 0.4)],
                Mode.IOBINDING: [noisy(38.7 + d, n, 0.3) for d in (0, 0.2, 0.4)],
            }
        ),
        "noisy flat": Recorded(
            {
                Mode.NAIVE: [noisy(40.0, 32, 12.0) for _ in range(3)],
                Mode.IOBINDING: [noisy(39.0, 32, 12.0) for _ in range(3)],
            }
        ),
        "clearly faster, five runs": Recorded(
            {
                Mode.NAIVE: [noisy(20.0, 40, 0.3) for _ in range(5)],
                Mode.IOBINDING: [noisy(15.0, 40, 0.3) for _ in range(5)],
            }
        ),
        "identical loops": Recorded({Mode.NAIVE: same, Mode.IOBINDING: [list(r) for r in same]}),
        "one run": Recorded(
            {
                Mode.NOCACHE: [ramp(50, 250, 40, 3)],
                Mode.NAIVE: [noisy(30.0, 40, 0.5)],
                Mode.IOBINDING: [noisy(25.0, 40, 0.5)],
            },
            {Mode.NOCACHE: 200.0},
        ),
        "falling (warm-up in the first tokens)": Recorded(
            {
                Mode.NAIVE: [ramp(60, 30, 48, 0.5) for _ in range(3)],
                Mode.IOBINDING: [ramp(58, 29, 48, 0.5) for _ in range(3)],
            }
        ),
        "too few tokens": Recorded(
            {
                Mode.NOCACHE: [[10.0, 20.0, 30.0, 40.0] for _ in range(3)],
                Mode.NAIVE: [[9.0, 9.5, 9.2, 9.1] for _ in range(3)],
                Mode.IOBINDING: [[8.0, 8.4, 8.1, 8.2] for _ in range(3)],
            }
        ),
        "caching changes nothing": Recorded(
            {
                Mode.NOCACHE: nocache_same,
                Mode.IOBINDING: [list(reversed(r)) for r in nocache_same],
            }
        ),
    }


def sweeps() -> dict[str, list[Recorded]]:
    def point(nocache: float | None, naive: float, iob: float, sd: float = 0.5) -> Recorded:
        runs: Runs = {Mode.NAIVE: [noisy(naive, 16, sd)], Mode.IOBINDING: [noisy(iob, 16, sd)]}
        if nocache is not None:
            # Each no-cache step re-reads the whole sequence: its time climbs within the answer.
            runs[Mode.NOCACHE] = [ramp(nocache * 0.97, nocache * 1.03, 16, nocache * 0.005)]
        return Recorded(runs)

    return {
        # The issue: 1564.3 ms at 130, 4988.8 ms at 513 (two points, no cache).
        "growing no-cache sweep": [point(1564.3, 40, 39), point(4988.8, 44, 42)],
        "growing four points": [point(None, 38 + 6 * i, 36 + 3 * i) for i in range(4)],
        "noisy flat three points": [point(None, 40, 40, 15.0) for _ in range(3)],
        "one point": [point(300.0, 40, 30)],
        "ratio reversed by context": [
            point(None, 30, 25),
            point(None, 40, 40),
            point(None, 45, 60),
        ],
    }


# ---- the reference: numpy on the raw series -------------------------------------------------
@dataclass(frozen=True)
class Ref:
    median: float
    low: float
    high: float


def ref_spread(values: list[float]) -> Ref:
    a = np.asarray(values, dtype=float)
    if len(a) < 4:
        return Ref(float(np.median(a)), float(a.min()), float(a.max()))
    q1, q2, q3 = np.percentile(a, [25, 50, 75])
    return Ref(float(q2), float(q1), float(q3))


def ref_per_token(runs: list[list[float]]) -> Ref:
    if len(runs) >= 2:
        return ref_spread([float(np.median(r)) for r in runs])
    return ref_spread(runs[0])


def ref_ratio_band(top: list[list[float]], bottom: list[list[float]]) -> tuple[float, float]:
    """The runs' own ratios (several runs), or one run's token spreads' widest ratio."""
    if len(top) >= 2:
        ratios = [np.median(a) / np.median(b) for a, b in zip(top, bottom, strict=True)]
        return float(min(ratios)), float(max(ratios))
    a, b = ref_per_token(top), ref_per_token(bottom)
    return a.low / b.high, a.high / b.low


def answer_s(run: list[float], ttft_ms: float) -> float:
    return (ttft_ms + sum(run)) / 1000


def close(shown: str, value: float, _digits: int = 0) -> bool:
    """`shown` is `value` rounded to the decimals it shows."""
    digits = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown) - value) <= 0.5 * 10**-digits + 1e-9


def check_spread(match: tuple[str | None, ...], ref: Ref, digits: int = 1) -> None:
    median, low, high = match
    assert median is not None and close(median, ref.median, digits), (match, ref)
    if low is not None and high is not None:
        assert close(low, ref.low, digits) and close(high, ref.high, digits), (match, ref)


def check_verdict(tail: str, value: float, band: tuple[float, float], who: str) -> str:
    """The words after a ratio against the ratio and the runs' band; returns the verdict."""
    low, high = band
    above, below = low > 1 + SHOWN and value > 1, high < 1 - SHOWN and value < 1
    if f"{who} faster" in tail:
        assert above, (tail, value, band)
        return "faster"
    if f"{who} slower" in tail:
        assert below, (tail, value, band)
        return "slower"
    assert "no measurable difference" in tail, tail
    assert not above and not below, (tail, value, band)
    return "none"


def check_trend(words: str, first: Ref, last: Ref) -> str:
    if words.startswith("higher"):
        assert last.low > first.high and last.median > first.median, (words, first, last)
        return "rose"
    if words.startswith("lower"):
        assert last.high < first.low and last.median < first.median, (words, first, last)
        return "fell"
    assert words.startswith("the two spreads overlap"), words
    assert not last.low > first.high and not last.high < first.low, (words, first, last)
    return "overlap"


# ---- the sentence kinds ---------------------------------------------------------------------
def check_comparison(sentence: str, rec: Recorded, result: dict[str, Any]) -> str:
    """Checks one sentence of a comparison against `rec`; returns its kind and verdict."""
    runs = rec.runs
    if m := re.fullmatch(r"Time per token \((.+?)\): (.+)\.", sentence):
        items = re.findall(rf"{LOOP} {SPREAD}", m.group(2))
        assert [LABELS[i[0]] for i in items] == list(runs)
        for label, *spread in items:
            check_spread(tuple(spread), ref_per_token(runs[LABELS[label]]))
        return "per token"
    pattern = (
        rf"IO-Binding vs Naive: Naive's {NUM} / IO-Binding's {NUM} ms per token = {NUM}x(.*)\."
    )
    if m := re.fullmatch(pattern, sentence):
        naive, iob = ref_per_token(runs[Mode.NAIVE]), ref_per_token(runs[Mode.IOBINDING])
        assert close(m.group(1), naive.median, 1) and close(m.group(2), iob.median, 1)
        value = naive.median / iob.median
        assert close(m.group(3), value, 2)
        band = ref_ratio_band(runs[Mode.NAIVE], runs[Mode.IOBINDING])
        return "io " + check_verdict(m.group(4), value, band, "IO-Binding")
    pattern = rf"By tokens/s \(.+\): IO-Binding's {NUM} / Naive's {NUM} = {NUM}x(.*)\."
    if m := re.fullmatch(pattern, sentence):
        speed = {
            mode: float(np.median([len(r) / sum(r) * 1000 for r in runs[mode]]))
            for mode in (Mode.NAIVE, Mode.IOBINDING)
        }
        assert close(m.group(1), speed[Mode.IOBINDING], 1)
        assert close(m.group(2), speed[Mode.NAIVE], 1)
        value = speed[Mode.IOBINDING] / speed[Mode.NAIVE]
        assert close(m.group(3), value, 2)
        by_median = (
            ref_per_token(runs[Mode.NAIVE]).median / ref_per_token(runs[Mode.IOBINDING]).median
        )
        other_way = (value > 1 + SHOWN and by_median < 1 - SHOWN) or (
            value < 1 - SHOWN and by_median > 1 + SHOWN
        )
        assert ("points the other way" in m.group(4)) == other_way
        return "speed, other way" if other_way else "speed"
    pattern = r"Caching, the whole (\d+)-token answer \(first token included\): (.+)\."
    if m := re.fullmatch(pattern, sentence):
        assert int(m.group(1)) == result["max_new_tokens"]
        verdicts = []
        nocache = runs[Mode.NOCACHE]
        ttft = rec.ttft_ms.get(Mode.NOCACHE, 100.0)
        answers_nc = [answer_s(r, ttft) for r in nocache]
        for part in m.group(2).split("; "):
            p = re.fullmatch(rf"No cache {NUM} s / {LOOP} {NUM} s = {NUM}x(.*)", part)
            assert p is not None, part
            mode = LABELS[p.group(2)]
            answers = [answer_s(r, rec.ttft_ms.get(mode, 100.0)) for r in runs[mode]]
            top, bottom = float(np.median(answers_nc)), float(np.median(answers))
            assert close(p.group(1), top, 2) and close(p.group(3), bottom, 2)
            assert close(p.group(4), top / bottom, 2)
            if len(answers) >= 2:
                ratios = [a / b for a, b in zip(answers_nc, answers, strict=True)]
                band = (min(ratios), max(ratios))
            else:
                band = (top / bottom, top / bottom)
            if band[0] == band[1]:  # one run: only past 10 % is called
                assert ("faster" in p.group(5)) == (top / bottom > 1.1), part
                verdicts.append("faster" if top / bottom > 1.1 else "none")
            else:
                verdicts.append(check_verdict(p.group(5), top / bottom, band, p.group(2)))
        return "caching " + ",".join(sorted(set(verdicts)))
    if m := re.fullmatch(
        rf"{LOOP} along the answer: (\d+) tokens, too few to tell a trend\.", sentence
    ):
        series = runs[LABELS[m.group(1)]][0]
        assert int(m.group(2)) == len(series) < 8
        return "along too few"
    pattern = (
        rf"{LOOP} along the answer \(first run\): "
        rf"{SPREAD} in the first quarter, {SPREAD} in the last: (.+)\."
    )
    if m := re.fullmatch(pattern, sentence):
        series = runs[LABELS[m.group(1)]][0]
        assert len(series) >= 8
        k = max(2, len(series) // 4)
        first, last = ref_spread(series[:k]), ref_spread(series[-k:])
        check_spread(m.group(2, 3, 4), first)
        check_spread(m.group(5, 6, 7), last)
        return "along " + check_trend(m.group(8), first, last)
    if sentence.startswith("On the cpu the model works in the host's memory: 0 bytes"):
        return "device"
    raise AssertionError(f"a sentence of no known kind: {sentence}")


def check_sweep(sentence: str, points: list[Recorded], contexts: list[int]) -> str:
    by_context = dict(zip(contexts, points, strict=True))
    pattern = rf"{LOOP}, time per token by context: (.+): (.+)\."
    if (m := re.fullmatch(pattern, sentence)) and "by context (" not in sentence:
        mode = LABELS[m.group(1)]
        items = re.findall(rf"{SPREAD} at (\d+)", m.group(2))
        shown = [int(c) for *_s, c in items]
        assert shown == [c for c in contexts if mode in by_context[c].runs]
        refs = [ref_per_token(by_context[int(c)].runs[mode]) for *_s, c in items]
        for (*spread, _c), ref in zip(items, refs, strict=True):
            check_spread(tuple(spread), ref)
        if len(items) == 1:
            assert m.group(3) == "one context only, no trend to tell"
            return "sweep one"
        return "sweep " + check_trend(m.group(3), refs[0], refs[-1])
    pattern = (
        r"IO-Binding vs Naive by context \(Naive's time per token / IO-Binding's\): (.+); (.+)\."
    )
    if m := re.fullmatch(pattern, sentence):
        item = (
            rf"{NUM} / {NUM} ms = {NUM}x \((?:{NUM}–{NUM}x|no spread)"
            r"(; no measurable difference)?\) at (\d+)"
        )
        items = re.findall(item, m.group(1))
        assert [int(i[-1]) for i in items] == contexts
        bands = []
        for top, bottom, value, low, high, none, context in items:
            runs = by_context[int(context)].runs
            naive, iob = ref_per_token(runs[Mode.NAIVE]), ref_per_token(runs[Mode.IOBINDING])
            assert close(top, naive.median, 1) and close(bottom, iob.median, 1)
            assert close(value, naive.median / iob.median, 2)
            band = ref_ratio_band(runs[Mode.NAIVE], runs[Mode.IOBINDING])
            ratio = naive.median / iob.median
            if low:
                assert close(low, band[0], 2) and close(high, band[1], 2)
            else:
                band = (ratio, ratio)
            bands.append(Ref(ratio, *band))
            above = band[0] > 1 + SHOWN and ratio > 1
            measurable = above or (band[1] < 1 - SHOWN and ratio < 1)
            if band[0] == band[1]:
                measurable = abs(ratio - 1) > 0.1
            assert bool(none) == (not measurable)
        if len(items) == 1:
            assert m.group(2) == "one context only, no trend to tell"
            return "sweep ratio one"
        words = m.group(2).removeprefix("the ratio is ")
        return "sweep ratio " + check_trend(words, bands[0], bands[-1])
    raise AssertionError(f"a sweep sentence of no known kind: {sentence}")


EXPECTED_KINDS = {
    "per token",
    "io faster",
    "io slower",
    "io none",
    "speed",
    "speed, other way",
    "caching faster",
    "caching none",
    "along rose",
    "along fell",
    "along overlap",
    "along too few",
    "device",
    "sweep rose",
    "sweep overlap",
    "sweep one",
    "sweep ratio rose",
    "sweep ratio fell",
    "sweep ratio overlap",
    "sweep ratio one",
}


def test_every_sentence_kind_holds_against_the_numbers_of_the_corpus() -> None:
    seen: dict[str, list[str]] = {}
    for name, rec in corpus().items():
        result = rec.result()
        for sentence in explanation(result, []).splitlines():
            seen.setdefault(check_comparison(sentence, rec, result), []).append(name)
    for name, points in sweeps().items():
        contexts = [130, 513, 1024, 2048][: len(points)]
        sweep = [p.result(c) for p, c in zip(points, contexts, strict=True)]
        for sentence in explanation(None, sweep).splitlines():
            seen.setdefault(check_sweep(sentence, points, contexts), []).append(name)
    missing = EXPECTED_KINDS - set(seen)
    assert not missing, f"no recorded run produced {missing}; seen {sorted(seen)}"


def lines_of(name: str) -> list[str]:
    rec = corpus()[name]
    return explanation(rec.result(), []).splitlines()


def test_the_issues_growing_loops_are_called_growing() -> None:
    text = lines_of("growing cached loops")
    for label in ("Naive", "IO-Binding", "No cache"):
        line = next(s for s in text if s.startswith(f"{label} along the answer"))
        assert "higher in the last than in the first quarter" in line, line
    assert not any("cannot tell" in s or "no steady growth" in s for s in text)


def test_the_issues_ratio_follows_its_own_column() -> None:
    text = lines_of("reversed ratios")
    io = next(s for s in text if s.startswith("IO-Binding vs Naive:"))
    assert "= 0.98x, IO-Binding slower" in io  # 37.9 / 38.7: slower, as the column reads
    speed = next(s for s in text if s.startswith("By tokens/s"))
    assert "points the other way" in speed


def test_the_issues_no_cache_sweep_is_called_higher() -> None:
    points = sweeps()["growing no-cache sweep"]
    sweep = [p.result(c) for p, c in zip(points, (130, 513), strict=True)]
    line = next(s for s in explanation(None, sweep).splitlines() if s.startswith("No cache"))
    assert re.search(r"15\d\d\.\d ms .* at 130, 4\d{3}\.\d ms .* at 513", line), line
    assert line.endswith("higher at 513 than at 130, the two spreads do not overlap.")


def _report(name: str) -> str:
    from chatapp.engine.bench.report import markdown_report

    recorded = corpus()[name]
    result = recorded.result()
    runs = len(next(iter(recorded.runs.values())))
    return markdown_report({**result, "model": "tiny", "layout": "shared-buffer", "repeats": runs})


def test_the_report_claims_no_saving_its_own_verdict_does_not_make() -> None:
    """Issue 47: "49.3 vs 40.3 ms … at 41 tokens" was called a saving beside "no measurable
    difference", over an answer that ran from 41 to 241 tokens of context."""
    flat = _report("identical loops")
    assert "IO-Binding vs Naive" in flat and "no measurable difference" in flat
    where = next(line for line in flat.splitlines() if line.startswith("On the "))
    assert "saves" not in where and "no saving is claimed" in where
    assert "over an answer from 20 to " in where
    faster = _report("clearly faster, five runs")
    assert "IO-Binding faster" in faster
    where = next(line for line in faster.splitlines() if line.startswith("On the "))
    assert "the time IO-Binding saves is inside the run" in where


def test_the_reports_brackets_say_what_they_are() -> None:
    three = _report("identical loops").splitlines()[0]
    assert "min–max in brackets" not in three
    assert "time per token, the range (min–max) of the runs' medians" in three
    assert "tokens/s and TTFT, min–max over the runs" in three
    five = _report("clearly faster, five runs").splitlines()[0]
    assert "time per token, the interquartile range of the runs' medians" in five


def test_every_ratio_carries_its_spread_and_verdict() -> None:
    """The tokens/s ratio too (it had neither, one line after "no measurable difference")."""
    for name in corpus():
        for line in lines_of(name):
            if line.startswith("By tokens/s"):
                assert "faster (" in line or "slower (" in line or "within the spread" in line


def test_a_sweep_names_the_lengths_typed_beside_those_measured() -> None:
    """Issue 47: 128 and 512 typed read as 130 and 513 only; the view's sentences and the
    report's table say both (a point measured at the length typed says one number)."""
    from chatapp.engine.bench.report import markdown_report

    points = sweeps()["growing no-cache sweep"]
    sweep = [{**points[0].result(130), "context_tokens": 128}, points[1].result(512)]
    said = explanation(None, sweep)
    assert "at 130 (128 typed)" in said and "at 512" in said
    assert "at 512 (" not in said and "(512 typed)" not in said
    header = {**corpus()["identical loops"].result(), "model": "tiny", "layout": "shared-buffer"}
    rows = markdown_report({**header, "repeats": 3, "sweep": sweep}).splitlines()
    assert any(row.startswith("| 130 (128 typed) |") for row in rows), rows
    assert any(row.startswith("| 512 |") for row in rows), rows
