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


class GenaiPeer:
    """onnxruntime-genai loaded on a model folder; one greedy fixed-length run at a time."""

    def __init__(self, folder: Path, threads: int | None) -> None:
        try:
            import onnxruntime_genai as og
        except ImportError as exc:
            if getattr(sys, "frozen", False):
                raise EngineError(
                    "onnxruntime-genai is not part of this packaged build; compare with it from "
                    "a source install (pip install 'chatapp[bench]')."
                ) from exc
            raise EngineError(
                "onnxruntime-genai is not installed: pip install 'chatapp[bench]' to compare "
                "with it."
            ) from exc
        config = og.Config(str(folder))
        config.clear_providers()
        if threads:
            overlay = {"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}
            config.overlay(json.dumps(overlay))
        self.og = og
        self.model = og.Model(config)

    def run(self, ids: list[int], n: int) -> dict[str, Any]:
        og = self.og
        params = og.GeneratorParams(self.model)
        # Exactly n greedy tokens, like the chatapp loops in the benchmark.
        params.set_search_options(
            do_sample=False, max_length=len(ids) + n, min_length=len(ids) + n, batch_size=1
        )
        gen = og.Generator(self.model, params)
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
        return {
            "ttft_s": first - started,
            "latencies_s": latencies,
            "token_ids": tokens,
            "tokens_per_s": len(latencies) / sum(latencies) if latencies else 0.0,
        }


def summarize_genai(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The same medians as the chatapp loops' summary (genai has no host-preparation split)."""

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    return {
        "tokens_per_s": med([r["tokens_per_s"] for r in runs]),
        "ttft_s": med([r["ttft_s"] for r in runs]),
        "latency_p50_s": med([float(np.percentile(r["latencies_s"], 50)) for r in runs]),
        "latency_p95_s": med([float(np.percentile(r["latencies_s"], 95)) for r in runs]),
        "host_prep_share": None,
        "tokens_per_s_all": [r["tokens_per_s"] for r in runs],
        "token_ids": runs[0]["token_ids"],
        "repeats": len(runs),
    }
