"""onnxruntime-genai on the same model folder, measured the same way (optional extra `bench`)."""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from chatapp.engine.errors import EngineError

perf = time.perf_counter


def _load(folder: Path, threads: int | None) -> Any:
    try:
        import onnxruntime_genai as og
    except ImportError as exc:
        if getattr(sys, "frozen", False):
            raise EngineError(
                "onnxruntime-genai is not part of this packaged build; compare with it from a "
                "source install (pip install 'chatapp[bench]')."
            ) from exc
        raise EngineError(
            "onnxruntime-genai is not installed: pip install 'chatapp[bench]' to compare with it."
        ) from exc
    config = og.Config(str(folder))
    config.clear_providers()
    if threads:
        overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}
        config.overlay(json.dumps(overlay))
    return og, og.Model(config)


def _one_run(og: Any, model: Any, ids: list[int], n: int) -> dict[str, Any]:
    params = og.GeneratorParams(model)
    # Exactly n greedy tokens, like the chatapp loops in the benchmark.
    params.set_search_options(
        do_sample=False, max_length=len(ids) + n, min_length=len(ids) + n, batch_size=1
    )
    gen = og.Generator(model, params)
    started = perf()
    gen.append_tokens(np.asarray(ids, dtype=np.int32))
    gen.generate_next_token()
    first = perf()
    tokens = [int(gen.get_next_tokens()[0])]
    latencies = []
    previous = first
    while not gen.is_done() and len(tokens) < n:
        gen.generate_next_token()
        now = perf()
        latencies.append(now - previous)
        previous = now
        tokens.append(int(gen.get_next_tokens()[0]))
    return {"ttft_s": first - started, "latencies_s": latencies, "token_ids": tokens}


def bench_genai(
    folder: Path, ids: list[int], n: int, repeats: int, threads: int | None
) -> dict[str, Any]:
    og, model = _load(folder, threads)
    _one_run(og, model, ids, min(8, n))  # warm-up
    runs = [_one_run(og, model, ids, n) for _ in range(repeats)]

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    def tps(run: dict[str, Any]) -> float:
        lat = run["latencies_s"]
        return len(lat) / sum(lat) if lat else 0.0

    return {
        "tokens_per_s": med([tps(r) for r in runs]),
        "ttft_s": med([r["ttft_s"] for r in runs]),
        "latency_p50_s": med([float(np.percentile(r["latencies_s"], 50)) for r in runs]),
        "latency_p95_s": med([float(np.percentile(r["latencies_s"], 95)) for r in runs]),
        "host_prep_share": None,
        "tokens_per_s_all": [tps(r) for r in runs],
        "token_ids": runs[0]["token_ids"],
        "repeats": repeats,
    }
