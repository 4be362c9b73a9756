"""Headless benchmark: the loops on the same prompt, warm-up, alternating repeats, medians."""

from __future__ import annotations

import logging
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import onnxruntime as ort

from chatapp import __version__
from chatapp.engine.bench import cpu_share, floor
from chatapp.engine.bench.peers import (
    Peer,
    PeerSettings,
    open_peers,
    peer_point,
    physical_floor,
)
from chatapp.engine.bench.stats import compare_runs, prompt_tokens_per_s
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError
from chatapp.engine.generation import Generation, StepEvent
from chatapp.engine.guards import DEFAULT_PRECISION
from chatapp.engine.metrics import RunStats
from chatapp.engine.model_context import ModelContext
from chatapp.engine.modes import CACHED_MODES, Mode
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message

Progress = Callable[[str], None]
log = logging.getLogger(__name__)
# Other work's load a quiet machine still shows (daemons, the shell): half a core.
BUSY_SLACK = 0.5


@dataclass(frozen=True)
class BenchConfig:
    model_dir: Path
    onnx_file: str | None = None  # which graph of the folder (default: the folder's default)
    device: str = "cpu"
    prompt: str = "Explain what a KV cache is in a few sentences."
    max_new_tokens: int = 128
    modes: tuple[Mode, ...] = CACHED_MODES  # the loops to run, in MODES order
    repeats: int = 3
    threads: int | None = None
    precision: str = DEFAULT_PRECISION  # the GGUF kernels' (guards.PRECISIONS)
    max_context: int | None = None
    context_tokens: int | None = None  # pad the prompt with real text to about this length
    peers: tuple[str, ...] = ()  # "genai", "llamacpp": other systems, a run beside each repeat
    peer_gguf: Path | None = None  # llama.cpp's GGUF (the CLI names the default model's own)
    peer_python: str | None = None  # a Python with llama-cpp-python (default: this one)
    sweep: list[int] = field(default_factory=list)
    floor: bool = True  # measure read bandwidth and print each system's share of the ceiling


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


# Where a benchmark's loops run: an Engine, or a context of a loaded model of its own (the
# window's comparison, which leaves the chat's cached prompt be).
Runs = Engine | ModelContext


def fixed_length(
    engine: Runs,
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


def loop_pair(
    engine: Runs,
    ids: list[int],
    n: int,
    should_stop: Callable[[], bool] | None = None,
    modes: Sequence[Mode] = CACHED_MODES,
) -> dict[str, Generation]:
    """One fixed-length greedy generation per loop, on cold caches, ready to run."""
    return {m: fixed_length(engine, ids, m, n, should_stop) for m in modes}


def interleaved(
    gens: dict[str, Generation], first: str | None = None
) -> Iterator[tuple[str, StepEvent]]:
    """Run the generations in lockstep, one step each in turn, yielding (mode, event).

    The loops keep separate caches, so alternating them token by token is exact; what it buys
    is fairness on a shared machine: a burst of load slows both loops' same tokens, not just
    whichever loop happened to be running, so their ratio holds even when the absolute
    numbers wander. Who goes first flips every round (A B, B A, A B, ...): work that follows
    each step, as the window redrawing its charts, then lands on both loops alike (with a
    fixed order the second loop took all of it: IO-Binding 0.72-0.93x of naive in the
    window against 1.04x in `chatapp bench`).
    """
    first = first if first in gens else next(iter(gens))
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
        order.reverse()


def run_interleaved(
    engine: Runs,
    ids: list[int],
    n: int,
    first: str | None = None,
    should_stop: Callable[[], bool] | None = None,
    modes: Sequence[Mode] = CACHED_MODES,
) -> dict[str, RunStats]:
    """The loops in lockstep to the end; their figures by mode."""
    gens = loop_pair(engine, ids, n, should_stop, modes)
    for _ in interleaved(gens, first):
        pass
    return {m: g.stats for m, g in gens.items()}


def bench_point(
    engine: Engine,
    ids: list[int],
    n: int,
    repeats: int,
    progress: Progress,
    peers: Sequence[Peer] = (),
    modes: Sequence[Mode] = CACHED_MODES,
) -> dict[str, Any]:
    """The loops on `ids`: a warm-up, then `repeats` interleaved runs (who leads alternates).

    Each peer (onnxruntime-genai, llama.cpp) runs once per repeat right beside the pair, before
    it and after it in turn, so that each repeat gives a ratio measured under the same load.
    """
    run_interleaved(engine, ids, min(8, n), modes=modes)
    for peer in peers:
        peer.run(ids, min(8, n))
    runs: dict[str, list[RunStats]] = {m: [] for m in modes}
    peer_runs: dict[str, list[RunStats]] = {p.name: [] for p in peers}
    for r in range(repeats):
        before = r % 2 == 0
        for peer in peers if before else ():
            peer_runs[peer.name].append(peer.run(ids, n))
        lead = modes[r % len(modes)]
        for mode, stats in run_interleaved(engine, ids, n, lead, modes=modes).items():
            runs[mode].append(stats)
        for peer in () if before else peers:
            peer_runs[peer.name].append(peer.run(ids, n))
        latest = {m: runs[m][-1] for m in modes} | {k: v[-1] for k, v in peer_runs.items()}
        progress(
            f"  repeat {r + 1}/{repeats}: "
            + ", ".join(
                f"{name} {s.tokens_per_s:6.1f} tok/s (TTFT {s.ttft_s * 1000:5.0f} ms, "
                f"prompt {prompt_tokens_per_s(s):6.0f} tok/s)"
                for name, s in latest.items()
            )
        )
    point = compare_runs(runs, len(ids))
    eos = set(engine.info.eos_token_ids)
    for name, their_runs in peer_runs.items():
        point |= peer_point(name, runs[Mode.IOBINDING], their_runs, eos)
    return point


def run_bench_suite(config: BenchConfig, progress: Progress | None = None) -> dict[str, Any]:
    report = progress or (lambda _m: None)
    if config.peers and Mode.IOBINDING not in config.modes:
        raise EngineError("Peers are compared with the IO-Binding loop: add iobinding to --modes.")
    start = LoadStart.now()
    engine = Engine(
        config.model_dir,
        config.device,
        Mode.IOBINDING,
        config.threads,
        config.max_context,
        onnx_file=config.onnx_file,
        precision=config.precision,
    )
    if config.context_tokens is not None and config.context_tokens >= engine.max_context:
        raise EngineError(
            f"--context-tokens {config.context_tokens} does not fit the context of "
            f"{engine.max_context} tokens (--context sets it, up to the model's)."
        )
    ids = bench_prompt_ids(engine, config.prompt, config.context_tokens)
    n = min(config.max_new_tokens, engine.max_context - len(ids) - 1)
    if n < 1:
        raise EngineError(
            f"The prompt ({len(ids)} tokens) leaves no room to generate in a context of "
            f"{engine.max_context} tokens."
        )
    report(f"{engine.info.describe()} on {engine.device.name}; prompt {len(ids)} tokens, {n} new")
    warning = start.early_warning(engine.threads)
    if warning:
        report(warning)
    # Sweep points past the allocated context are skipped, before any prompt is built for them.
    sweep = [t for t in config.sweep if t < engine.max_context]
    longest = max([len(ids), *[t + 64 for t in sweep]]) + n + 8
    settings = PeerSettings(config.peers, config.threads, config.peer_gguf, config.peer_python)
    with open_peers(settings, engine, longest, report) as peers:
        result: dict[str, Any] = {
            **result_header(engine, n, config.repeats),
            "peers": {p.name: p.describe() for p in peers},
            **bench_point(engine, ids, n, config.repeats, report, peers, config.modes),
        }
        if config.sweep:
            result["sweep"] = []
            for target in config.sweep:
                sweep_ids = (
                    bench_prompt_ids(engine, config.prompt, target) if target in sweep else []
                )
                if not sweep_ids or len(sweep_ids) + n >= engine.max_context:
                    report(f"context {target}: skipped, longer than the allocated context")
                    continue
                report(f"context {target} ({len(sweep_ids)} tokens)")
                point = bench_point(
                    engine, sweep_ids, n, config.repeats, report, peers, config.modes
                )
                point["context_tokens"] = target
                result["sweep"].append(point)
        if config.floor:
            report("measuring this machine's read bandwidth for the physical floor")
            result["floor"] = physical_floor(engine, peers, result)
    result["load_average"] = start.record(engine.threads)
    return result


@dataclass(frozen=True)
class LoadStart:
    """The machine's load as a measurement starts; `record` adds the end's (every bench's
    "load_average": what report.conditions prints, with busy_warning's sentence)."""

    load: list[float]  # the load averages (1, 5, 15 min) before
    others: float | None  # other work's cores just before (cpu_share)
    sample: cpu_share.CpuSample

    @classmethod
    def now(cls) -> LoadStart:
        before, others = load_average(), cpu_share.others_now()
        return cls(before, others, cpu_share.sample())

    def early_warning(self, threads: int | None) -> str | None:
        return busy_warning(self.load, [], threads, (self.others, None))

    def record(self, threads: int | None) -> dict[str, Any]:
        after = load_average()
        others = (self.others, cpu_share.others_cores(self.sample, cpu_share.sample()))
        return {
            "before": self.load,
            "after": after,
            "cores": os.cpu_count(),
            "others_cores": {"before": others[0], "during": others[1]},
            "busy_warning": busy_warning(self.load, after, threads, others),
        }


def busy_warning(
    before: list[float],
    after: list[float],
    threads: int | None,
    others: tuple[float | None, float | None] = (None, None),
) -> str | None:
    """A sentence when other work competed for the cores a run needs, else None.

    `others` is other processes' CPU use in cores, measured just before the run and during it
    (cpu_share: the machine's busy time less this process's and its peers'). Where it could not
    be measured, the load averages stand in: the 1-minute load before the run, and after it less
    the run's own threads; but a load average still counts a run that ended a minute ago, so
    back-to-back runs read it as other work. Other work leaving fewer cores than the run's
    threads (by more than BUSY_SLACK) means every system measured less than it would alone, so
    the report says so rather than changing how any system runs (report.conditions adds what it
    means for llama.cpp where llama.cpp ran).
    """
    cores = os.cpu_count() or 1
    need = threads or cores
    spare = cores - need + BUSY_SLACK
    measured = [x for x in others if x is not None]
    if measured:
        if max(measured) <= spare:
            return None
        during = f", {others[1]} during the run" if others[1] is not None else ""
        seen = f"other work took {others[0]} cores before the run{during}"
    else:
        estimates = [x for x in (before[:1] + [y - need for y in after[:1]]) if x > spare]
        if not estimates:
            return None
        seen = (
            f"load average {before[0] if before else '?'} before, "
            f"{after[0] if after else '?'} after"
        )
    return (
        f"Warning: the machine was busy ({seen}, on {cores} cores; the runs use {need} "
        "threads): every system got less than its cores, so tokens/s are low and ratios less "
        "certain."
    )


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # not on every platform
        return []


def result_header(engine: Engine, max_new_tokens: int, repeats: int) -> dict[str, Any]:
    """What was measured, where: the first keys of every result (bench, comparison view)."""
    return {
        "model": engine.info.name,
        "model_dir": str(engine.info.folder),
        "onnx_file": engine.info.onnx_file,
        "kernels": engine.kernels,  # GGUF kernels (native graph) or ORT's
        "precision": engine.precision_in_effect,  # fast | exact; None: no GGUF kernels
        "layout": engine.info.layout.value,
        "device": engine.device.name,
        "device_label": engine.device.label,
        "device_own_memory": engine.device.own_memory,
        "fallback_reason": engine.fallback_reason,
        "threads": engine.threads,
        "weight_bytes_per_step": _weight_bytes_per_step(engine),
        # The tokenizer's share of the process's memory, measured when it loaded.
        "tokenizer_bytes": engine.tokenizer.resident_bytes,
        "vocab_size": engine.info.vocab_size,
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "environment": _environment(),
    }


def _weight_bytes_per_step(engine: Engine) -> int | None:
    """The weights one decode step reads from the folder (None for a graph it cannot read)."""
    try:
        return floor.onnx_weight_bytes_per_step(engine.info.onnx_path)
    except Exception:  # an optional figure: a graph onnx cannot parse has none
        log.warning("weight bytes per step unknown for %s", engine.info.onnx_path, exc_info=True)
        return None


def _environment() -> dict[str, Any]:
    return {
        "chatapp": __version__,
        "onnxruntime": ort.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
