"""Headless benchmark: both loops on the same prompt, warm-up, alternating repeats, medians."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import onnxruntime as ort

from chatapp import __version__
from chatapp.engine.chat import Message
from chatapp.engine.engine import MODES, Engine
from chatapp.engine.genai_peer import GenaiPeer
from chatapp.engine.generation import Generation, StepEvent
from chatapp.engine.metrics import RunStats
from chatapp.engine.sampling import GREEDY

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchConfig:
    model_dir: Path
    device: str = "cpu"
    prompt: str = "Explain what a KV cache is in a few sentences."
    max_new_tokens: int = 128
    repeats: int = 3
    threads: int | None = None
    max_context: int | None = None
    context_tokens: int | None = None  # pad the prompt with real text to about this length
    peer: str | None = None  # "genai": onnxruntime-genai on the same folder, same run
    sweep: list[int] = field(default_factory=list)


def filler_text() -> str:
    return resources.files("chatapp.resources").joinpath("bench_text.md").read_text("utf-8")


def bench_prompt_ids(engine: Engine, prompt: str, context_tokens: int | None) -> list[int]:
    """Chat-template ids of `prompt`, preceded by real text so the total is about C tokens."""
    question = [Message("user", prompt)]
    base = engine.tokenizer.chat_ids(question)
    if not context_tokens or context_tokens <= len(base):
        return base
    filler_ids = engine.tokenizer.encode(filler_text() + "\n\n")
    need = context_tokens - len(base)
    ids = (filler_ids * (need // len(filler_ids) + 1))[:need]
    padded = engine.tokenizer.decode(ids) + "\n\n" + prompt
    return engine.tokenizer.chat_ids([Message("user", padded)])


def fixed_length(
    engine: Engine,
    ids: list[int],
    mode: str,
    n: int,
    should_stop: Callable[[], bool] | None = None,
) -> Generation:
    """A greedy run of exactly n tokens (end-of-text ignored) on a cold cache."""
    loop = engine.loop(mode)
    loop.reset()
    settings = replace(GREEDY, max_new_tokens=n)
    return engine.generate_ids(ids, settings, mode, should_stop, ignore_eos=True)


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def summarize(runs: list[RunStats]) -> dict[str, Any]:
    """Medians over repeats of each figure, their spread, and the first run's series."""
    speeds = [r.tokens_per_s for r in runs]
    ttfts = [r.ttft_s for r in runs]
    return {
        "tokens_per_s": _median(speeds),
        "ttft_s": _median(ttfts),
        "spread": {"tokens_per_s": [min(speeds), max(speeds)], "ttft_s": [min(ttfts), max(ttfts)]},
        "latency_p50_s": _median([r.latency_percentile(50) for r in runs]),
        "latency_p95_s": _median([r.latency_percentile(95) for r in runs]),
        "host_prep_share": _median([r.host_prep_share for r in runs]),
        "run_s_per_token": _median([_mean([s.run_s for s in r.steps]) for r in runs]),
        "host_s_per_token": _median([_mean([s.host_s for s in r.steps]) for r in runs]),
        "sample_s_per_token": _median([_mean([s.sample_s for s in r.steps]) for r in runs]),
        "transfer": {key: _median([r.transfer()[key] for r in runs]) for key in runs[0].transfer()},
        "perplexity": runs[0].perplexity,
        "prompt_perplexity": runs[0].prompt_perplexity,
        "repeats": len(runs),
        "tokens_per_s_all": [r.tokens_per_s for r in runs],
        "first_run": runs[0].to_dict(),
    }


def summarize_peer(runs: list[RunStats]) -> dict[str, Any]:
    """A peer's speed figures, computed like the loops'; it reports no host / run split."""
    full = summarize(runs)
    keys = ("tokens_per_s", "ttft_s", "latency_p50_s", "latency_p95_s", "repeats")
    return {k: full[k] for k in keys} | {
        "host_prep_share": None,
        "tokens_per_s_all": full["tokens_per_s_all"],
        "token_ids": runs[0].token_ids,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def loop_pair(
    engine: Engine, ids: list[int], n: int, should_stop: Callable[[], bool] | None = None
) -> dict[str, Generation]:
    """One fixed-length greedy generation per loop, on cold caches, ready to run."""
    return {m: fixed_length(engine, ids, m, n, should_stop) for m in MODES}


def interleaved(
    gens: dict[str, Generation], first: str = MODES[0]
) -> Iterator[tuple[str, StepEvent]]:
    """Run the generations in lockstep, one step each in turn, yielding (mode, event).

    The loops keep separate caches, so alternating them token by token is exact; what it buys
    is fairness on a shared machine: a burst of load slows both loops' same tokens, not just
    whichever loop happened to be running, so their ratio holds even when the absolute
    numbers wander.
    """
    order = [first, *[m for m in gens if m != first]]
    iterators = {m: iter(gens[m]) for m in order}
    while iterators:
        for mode in order:
            it = iterators.get(mode)
            if it is None:
                continue
            event = next(it, None)
            if event is None:
                del iterators[mode]
            else:
                yield mode, event


def run_interleaved(
    engine: Engine,
    ids: list[int],
    n: int,
    first: str = MODES[0],
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, RunStats]:
    """Both loops in lockstep to the end; their figures by mode."""
    gens = loop_pair(engine, ids, n, should_stop)
    for _ in interleaved(gens, first):
        pass
    return {m: g.stats for m, g in gens.items()}


def bench_point(
    engine: Engine,
    ids: list[int],
    n: int,
    repeats: int,
    progress: Progress,
    peer: GenaiPeer | None = None,
) -> dict[str, Any]:
    """Both loops on `ids`: a warm-up, then `repeats` interleaved runs (who leads alternates).

    A peer (onnxruntime-genai) runs once per repeat right beside the pair, before it and after it
    in turn, so that each repeat gives a ratio measured under the same load.
    """
    run_interleaved(engine, ids, min(8, n))
    if peer is not None:
        peer.run(ids, min(8, n))
    runs: dict[str, list[RunStats]] = {m: [] for m in MODES}
    peer_runs: list[RunStats] = []
    for r in range(repeats):
        if peer is not None and r % 2 == 0:
            peer_runs.append(peer.run(ids, n))
        for mode, stats in run_interleaved(engine, ids, n, MODES[r % len(MODES)]).items():
            runs[mode].append(stats)
        if peer is not None and r % 2 == 1:
            peer_runs.append(peer.run(ids, n))
        progress(
            f"  repeat {r + 1}/{repeats}: "
            + ", ".join(
                f"{m} {runs[m][-1].tokens_per_s:6.1f} tok/s "
                f"(TTFT {runs[m][-1].ttft_s * 1000:5.0f} ms)"
                for m in MODES
            )
            + (
                f", genai {peer_runs[-1].tokens_per_s:6.1f} tok/s "
                f"(TTFT {peer_runs[-1].ttft_s * 1000:5.0f} ms)"
                if peer_runs
                else ""
            )
        )
    point = compare_runs(runs, len(ids))
    if peer_runs:
        point["genai"] = summarize_peer(peer_runs)
        point["iobinding_vs_genai"] = statistics.median(
            _ratio(ours.tokens_per_s, theirs.tokens_per_s)
            for ours, theirs in zip(runs["iobinding"], peer_runs, strict=True)
        )
        ours = runs["iobinding"][0].token_ids
        # genai suppresses end-of-text to reach the length; compare up to where ours had it.
        eos = set(engine.info.eos_token_ids)
        cut = next((i for i, t in enumerate(ours) if t in eos), len(ours))
        point["genai_same_tokens"] = peer_runs[0].token_ids[:cut] == ours[:cut]
    return point


def compare_runs(runs: dict[str, list[RunStats]], prompt_tokens: int) -> dict[str, Any]:
    """Both loops' runs on one prompt as a result point (also the comparison view's)."""
    naive, iob = summarize(runs["naive"]), summarize(runs["iobinding"])
    return {
        "prompt_tokens": prompt_tokens,
        "naive": naive,
        "iobinding": iob,
        "same_tokens": runs["naive"][0].token_ids == runs["iobinding"][0].token_ids,
        "speedup_tokens_per_s": _ratio(iob["tokens_per_s"], naive["tokens_per_s"]),
        "speedup_latency": _ratio(naive["latency_p50_s"], iob["latency_p50_s"]),
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def run_bench_suite(config: BenchConfig, progress: Progress | None = None) -> dict[str, Any]:
    report = progress or (lambda _m: None)
    engine = Engine(
        config.model_dir, config.device, "iobinding", config.threads, config.max_context
    )
    ids = bench_prompt_ids(engine, config.prompt, config.context_tokens)
    n = min(config.max_new_tokens, engine.max_context - len(ids) - 1)
    report(f"{engine.info.describe()} on {engine.device.name}; prompt {len(ids)} tokens, {n} new")
    peer = GenaiPeer(engine.info.folder, config.threads) if config.peer == "genai" else None
    if peer is not None:
        report("with onnxruntime-genai on the same folder, a run beside each repeat")
    result: dict[str, Any] = {
        **result_header(engine, n, config.repeats),
        **bench_point(engine, ids, n, config.repeats, report, peer),
    }
    if config.sweep:
        result["sweep"] = []
        for target in config.sweep:
            sweep_ids = bench_prompt_ids(engine, config.prompt, target)
            if len(sweep_ids) + n >= engine.max_context:
                report(f"context {target}: skipped, longer than the allocated context")
                continue
            report(f"context {target} ({len(sweep_ids)} tokens)")
            point = bench_point(engine, sweep_ids, n, config.repeats, report)
            point["context_tokens"] = target
            result["sweep"].append(point)
    return result


def result_header(engine: Engine, max_new_tokens: int, repeats: int) -> dict[str, Any]:
    """What was measured, where: the first keys of every result (bench, comparison view)."""
    return {
        "model": engine.info.name,
        "model_dir": str(engine.info.folder),
        "layout": engine.info.layout.value,
        "device": engine.device.name,
        "device_label": engine.device.label,
        "device_own_memory": engine.device.own_memory,
        "fallback_reason": engine.fallback_reason,
        "threads": engine.threads,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "environment": _environment(),
    }


def _environment() -> dict[str, Any]:
    return {
        "chatapp": __version__,
        "onnxruntime": ort.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
