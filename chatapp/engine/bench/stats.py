"""Figures over repeats: medians, spreads, the loops side by side, ratios."""

from __future__ import annotations

import statistics
from typing import Any

from chatapp.engine.metrics import RunStats
from chatapp.engine.modes import MODES, Mode


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def summarize(runs: list[RunStats]) -> dict[str, Any]:
    """Medians over repeats of each figure, their spread, and the first run's series."""
    speeds = [r.tokens_per_s for r in runs]
    ttfts = [r.ttft_s for r in runs]
    prompt_speeds = [prompt_tokens_per_s(r) for r in runs]
    answers = [answer_s(r) for r in runs]
    return {
        "tokens_per_s": median(speeds),
        "ttft_s": median(ttfts),
        "prompt_tokens_per_s": median(prompt_speeds),
        "answer_s": median(answers),
        "spread": {
            "tokens_per_s": [min(speeds), max(speeds)],
            "ttft_s": [min(ttfts), max(ttfts)],
            "answer_s": [min(answers), max(answers)],
        },
        "latency_p50_s": median([r.latency_percentile(50) for r in runs]),
        "latency_p95_s": median([r.latency_percentile(95) for r in runs]),
        "host_prep_share": median([r.host_prep_share for r in runs]),
        "run_s_per_token": median([_mean([s.run_s for s in r.steps]) for r in runs]),
        "host_s_per_token": median([_mean([s.host_s for s in r.steps]) for r in runs]),
        "sample_s_per_token": median([_mean([s.sample_s for s in r.steps]) for r in runs]),
        "transfer": {key: median([r.transfer()[key] for r in runs]) for key in runs[0].transfer()},
        "perplexity": runs[0].perplexity,
        "prompt_perplexity": runs[0].prompt_perplexity,
        "repeats": len(runs),
        "tokens_per_s_all": [r.tokens_per_s for r in runs],
        "answer_s_all": answers,
        "latency_p50_s_all": [r.latency_percentile(50) for r in runs],
        "first_run": runs[0].to_dict(),
    }


def summarize_peer(runs: list[RunStats]) -> dict[str, Any]:
    """A peer's speed figures, computed like the loops'; it reports no host / run split."""
    full = summarize(runs)
    keys = (
        "tokens_per_s",
        "ttft_s",
        "prompt_tokens_per_s",
        "spread",
        "latency_p50_s",
        "latency_p95_s",
        "repeats",
    )
    return {k: full[k] for k in keys} | {
        "host_prep_share": None,
        "tokens_per_s_all": full["tokens_per_s_all"],
        "token_ids": runs[0].token_ids,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def compare_runs(runs: dict[str, list[RunStats]], prompt_tokens: int) -> dict[str, Any]:
    """The loops' runs on one prompt as a result point (also the comparison view's).

    With both cached loops: IO-Binding's speed-up over naive. With the loop without a cache:
    caching's speed-up, the whole answer's time (first token included, as the write-up times
    a 200-token sample) without a cache over each cached loop's, as the median of the repeats'
    ratios (the loops of one repeat ran in lockstep, under the same load).
    """
    modes = [m for m in MODES if m in runs]
    point: dict[str, Any] = {"prompt_tokens": prompt_tokens}
    point |= {m: summarize(runs[m]) for m in modes}
    first_tokens = [runs[m][0].token_ids for m in modes]
    point["same_tokens"] = all(t == first_tokens[0] for t in first_tokens)
    if Mode.NAIVE in runs and Mode.IOBINDING in runs:
        naive, iob = point[Mode.NAIVE], point[Mode.IOBINDING]
        point["speedup_tokens_per_s"] = ratio(iob["tokens_per_s"], naive["tokens_per_s"])
        point["speedup_latency"] = ratio(naive["latency_p50_s"], iob["latency_p50_s"])
    if Mode.NOCACHE in runs:
        point["caching_speedup"] = {
            m: median(
                [
                    ratio(answer_s(a), answer_s(b))
                    for a, b in zip(runs[Mode.NOCACHE], runs[m], strict=True)
                ]
            )
            for m in modes
            if m != Mode.NOCACHE
        }
    return point


def prompt_tokens_per_s(run: RunStats) -> float:
    """The prompt's tokens over the time to first token (prefill and the first sample)."""
    return ratio(run.prompt_tokens, run.ttft_s)


def answer_s(run: RunStats) -> float:
    """The whole answer's time: the first token (prompt included) and every one after it."""
    return run.ttft_s + run.decode_s


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0
