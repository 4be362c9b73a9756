"""Figures over repeats: medians, spreads, both loops side by side, ratios."""

from __future__ import annotations

import statistics
from typing import Any

from chatapp.engine.metrics import RunStats
from chatapp.engine.modes import Mode


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def summarize(runs: list[RunStats]) -> dict[str, Any]:
    """Medians over repeats of each figure, their spread, and the first run's series."""
    speeds = [r.tokens_per_s for r in runs]
    ttfts = [r.ttft_s for r in runs]
    return {
        "tokens_per_s": median(speeds),
        "ttft_s": median(ttfts),
        "spread": {"tokens_per_s": [min(speeds), max(speeds)], "ttft_s": [min(ttfts), max(ttfts)]},
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
        "first_run": runs[0].to_dict(),
    }


def summarize_peer(runs: list[RunStats]) -> dict[str, Any]:
    """A peer's speed figures, computed like the loops'; it reports no host / run split."""
    full = summarize(runs)
    keys = ("tokens_per_s", "ttft_s", "spread", "latency_p50_s", "latency_p95_s", "repeats")
    return {k: full[k] for k in keys} | {
        "host_prep_share": None,
        "tokens_per_s_all": full["tokens_per_s_all"],
        "token_ids": runs[0].token_ids,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def compare_runs(runs: dict[str, list[RunStats]], prompt_tokens: int) -> dict[str, Any]:
    """Both loops' runs on one prompt as a result point (also the comparison view's)."""
    naive, iob = summarize(runs[Mode.NAIVE]), summarize(runs[Mode.IOBINDING])
    return {
        "prompt_tokens": prompt_tokens,
        Mode.NAIVE: naive,
        Mode.IOBINDING: iob,
        "same_tokens": runs[Mode.NAIVE][0].token_ids == runs[Mode.IOBINDING][0].token_ids,
        "speedup_tokens_per_s": ratio(iob["tokens_per_s"], naive["tokens_per_s"]),
        "speedup_latency": ratio(naive["latency_p50_s"], iob["latency_p50_s"]),
    }


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0
