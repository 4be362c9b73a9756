"""Figures of one generation: tokens/s, time to first token, latency series, perplexity."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StepTiming:
    """Where the time of one step went (seconds)."""

    host_s: float  # preparing the inputs / KV for this run (the naive loop's KV round trip)
    run_s: float  # inside onnxruntime, until the device has finished
    sample_s: float  # choosing the token and turning it into text
    h2d_bytes: int = 0  # host -> device for this run (0 where the device is the host)
    d2h_bytes: int = 0  # device -> host

    @property
    def total_s(self) -> float:
        return self.host_s + self.run_s + self.sample_s


@dataclass
class RunStats:
    mode: str
    device: str
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV came from the previous turn
    context_length: int = 0
    ttft_s: float = 0.0  # request -> first token (prefill + first sample)
    prefill: StepTiming | None = None
    steps: list[StepTiming] = field(default_factory=list)  # decode steps, one per later token
    latencies_s: list[float] = field(default_factory=list)  # wall time between tokens
    logprobs: list[float] = field(default_factory=list)  # of each generated token
    prompt_logprobs: list[float] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str = ""  # eos | length | stop | error
    # Speculative decoding: per verifying run, the tokens it drafted and how many were kept.
    drafted: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    # What a backend says beyond these (a server): the model that answered, where it names
    # it; the server's own figures of this answer, where it sends them; and the AnswerFigures
    # fields it cannot measure (None in the record, never 0).
    model: str = ""
    server_figures: dict[str, Any] | None = None
    unmeasured: frozenset[str] = frozenset()

    @property
    def generated_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def drafted_tokens(self) -> int:
        return sum(self.drafted)

    @property
    def accepted_tokens(self) -> int:
        return sum(self.accepted)

    @property
    def runs(self) -> int:
        """Forward passes of the decode steps: one per token after the first, less the tokens
        that came from drafts the model kept."""
        return max(0, len(self.latencies_s) - sum(self.accepted))

    @property
    def decode_s(self) -> float:
        return float(sum(self.latencies_s))

    @property
    def tokens_per_s(self) -> float:
        """Decode speed: tokens after the first / their time (prefill excluded)."""
        n = len(self.latencies_s)
        return n / self.decode_s if n and self.decode_s > 0 else 0.0

    @property
    def perplexity(self) -> float:
        return _perplexity(self.logprobs)

    @property
    def prompt_perplexity(self) -> float:
        return _perplexity(self.prompt_logprobs)

    def latency_percentile(self, q: float) -> float:
        return float(np.percentile(self.latencies_s, q)) if self.latencies_s else 0.0

    @property
    def host_prep_share(self) -> float:
        """Share of decode-step time spent preparing inputs on the host."""
        total = sum(s.total_s for s in self.steps)
        return sum(s.host_s for s in self.steps) / total if total > 0 else 0.0

    @property
    def h2d_bytes_per_token(self) -> float:
        """Median host -> device bytes of a decode step."""
        return _median([s.h2d_bytes for s in self.steps])

    @property
    def d2h_bytes_per_token(self) -> float:
        """Median device -> host bytes of a decode step."""
        return _median([s.d2h_bytes for s in self.steps])

    def transfer(self) -> dict[str, float]:
        prefill = self.prefill or StepTiming(0.0, 0.0, 0.0)
        return {
            "h2d_bytes_per_token": self.h2d_bytes_per_token,
            "d2h_bytes_per_token": self.d2h_bytes_per_token,
            "prefill_h2d_bytes": prefill.h2d_bytes,
            "prefill_d2h_bytes": prefill.d2h_bytes,
        }

    @property
    def tokens_in_context(self) -> int:
        return self.prompt_tokens + self.generated_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "device": self.device,
            "finish_reason": self.finish_reason,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "generated_tokens": self.generated_tokens,
            "context_length": self.context_length,
            "tokens_per_s": self.tokens_per_s,
            "ttft_s": self.ttft_s,
            "perplexity": _finite(self.perplexity),
            "prompt_perplexity": _finite(self.prompt_perplexity),
            "latency_p50_s": self.latency_percentile(50),
            "latency_p95_s": self.latency_percentile(95),
            "host_prep_share": self.host_prep_share,
            "transfer": self.transfer(),
            "latencies_s": list(self.latencies_s),
            "steps": [
                {
                    "host_s": s.host_s,
                    "run_s": s.run_s,
                    "sample_s": s.sample_s,
                    "h2d_bytes": s.h2d_bytes,
                    "d2h_bytes": s.d2h_bytes,
                }
                for s in self.steps
            ],
            "token_ids": list(self.token_ids),
            "speculative": {
                "runs": self.runs,
                "drafted": list(self.drafted),
                "accepted": list(self.accepted),
            },
        }


def _median(values: list[int]) -> float:
    return float(np.median(values)) if values else 0.0


def _perplexity(logprobs: list[float]) -> float:
    """exp(-mean logprob); infinite (shown "> 1,000", stored as unknown) where that overflows:
    a model with huge weights gives logprobs of -1e6, and a figure must never end an answer."""
    if not logprobs:
        return float("nan")
    try:
        return math.exp(-sum(logprobs) / len(logprobs))
    except OverflowError:
        return math.inf


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
