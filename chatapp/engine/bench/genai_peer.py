"""onnxruntime-genai on the same model folder, measured the same way (optional extra `bench`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from chatapp.engine.errors import EngineError
from chatapp.engine.metrics import RunStats

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

    def run(self, ids: list[int], n: int) -> RunStats:
        og = self.og
        params = og.GeneratorParams(self.model)
        # Exactly n greedy tokens, like the chatapp loops in the benchmark.
        params.set_search_options(
            do_sample=False, max_length=len(ids) + n, min_length=len(ids) + n, batch_size=1
        )
        gen = og.Generator(self.model, params)
        stats = RunStats(mode="genai", device="cpu", prompt_tokens=len(ids))
        started = perf()
        gen.append_tokens(np.asarray(ids, dtype=np.int32))
        gen.generate_next_token()
        previous = perf()
        stats.ttft_s = previous - started
        stats.token_ids.append(int(gen.get_next_tokens()[0]))
        while not gen.is_done() and stats.generated_tokens < n:
            gen.generate_next_token()
            now = perf()
            stats.latencies_s.append(now - previous)
            previous = now
            stats.token_ids.append(int(gen.get_next_tokens()[0]))
        stats.finish_reason = "length"
        return stats
