"""How close a model's logits come to a reference's: the metrics and the engine's side.

A text is cut into windows of `window` tokens that each start with an empty cache, and in each
the second half is scored (as llama.cpp's perplexity tool does: every scored position has at
least half a window of context): the logits at position j predict token j + 1, for j from
window // 2 to window - 2. Against a reference's logits at the same positions:
- KL divergence KL(reference || model) per position, in nats: its mean and 99th percentile;
- top-1 agreement: the share of positions whose most likely token is the reference's;
- perplexity of the text under the model's logits.

The engine gives its logits two ways: "prompt" (a window read as one prompt, the scored rows
returned by the same run) and "steps" (the first half as a prompt, then one token per decode
step, as an answer is written); the GGUF kernels multiply a prompt and a step differently.
session/fidelity.py runs the float64 reference (chatapp/convert/reference.py) beside it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from chatapp.engine.engine import Engine

WINDOW = 512  # tokens per window, as llama.cpp's perplexity default
WAYS = ("prompt", "steps")


def windows(n_tokens: int, window: int = WINDOW) -> list[range]:
    """The windows of a text of `n_tokens` tokens: whole windows only, one after another."""
    if window < 4:
        raise ValueError(f"a window of {window} tokens leaves nothing to score")
    return [range(start, start + window) for start in range(0, n_tokens - window + 1, window)]


def scored_positions(window: int) -> range:
    """The positions inside a window whose logits are scored (each predicts the next token)."""
    return range(window // 2, window - 1)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities in float64 along the last axis."""
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return np.asarray(shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True)))


def kl_divergence(reference: np.ndarray, model: np.ndarray) -> np.ndarray:
    """KL(reference || model) in nats for each row of two [positions, vocab] logit arrays."""
    ref, mine = log_softmax(reference), log_softmax(model)
    return np.asarray((np.exp(ref) * (ref - mine)).sum(axis=-1))


@dataclass
class FidelityTally:
    """Per-position figures of one system, added window by window."""

    kld: list[np.ndarray] = field(default_factory=list)
    agree: list[np.ndarray] = field(default_factory=list)
    target_logprob: list[np.ndarray] = field(default_factory=list)

    def add(self, reference: np.ndarray, model: np.ndarray, targets: Sequence[int]) -> None:
        """`reference`, `model`: logits [positions, vocab]; `targets`: the next token of each."""
        if reference.shape != model.shape or len(targets) != model.shape[0]:
            raise ValueError(
                f"logits {model.shape} against the reference's {reference.shape} "
                f"for {len(targets)} targets"
            )
        self.kld.append(kl_divergence(reference, model))
        self.agree.append(reference.argmax(axis=-1) == model.argmax(axis=-1))
        rows = np.arange(len(targets))
        self.target_logprob.append(log_softmax(model)[rows, np.asarray(targets)])

    def metrics(self) -> FidelityMetrics:
        kld = np.concatenate(self.kld)
        logprob = np.concatenate(self.target_logprob)
        return FidelityMetrics(
            positions=int(kld.size),
            mean_kld=float(kld.mean()),
            p99_kld=float(np.percentile(kld, 99)),
            top1_agreement=float(np.concatenate(self.agree).mean()),
            perplexity=float(math.exp(-logprob.mean())),
        )


@dataclass(frozen=True)
class FidelityMetrics:
    positions: int
    mean_kld: float  # nats
    p99_kld: float
    top1_agreement: float  # 0..1
    perplexity: float

    def to_dict(self) -> dict[str, float | int]:
        return {
            "positions": self.positions,
            "mean_kld": self.mean_kld,
            "p99_kld": self.p99_kld,
            "top1_agreement": self.top1_agreement,
            "perplexity": self.perplexity,
        }


def engine_window_logits(engine: Engine, ids: Sequence[int], way: str) -> np.ndarray:
    """The engine's logits [scored positions, vocab] (float32) of one window `ids`, read on a
    fresh cache: as one prompt ("prompt") or the second half one decode step at a time
    ("steps")."""
    scored = scored_positions(len(ids))
    loop = engine.loop()
    loop.reset()
    try:
        if way == "prompt":
            return np.array(loop.forward(ids, rows=list(scored)).logits, dtype=np.float32)
        if way != "steps":
            raise ValueError(f"a way is one of {WAYS}, not {way!r}")
        rows = [np.array(loop.forward(ids[: scored.start + 1]).logits, dtype=np.float32)]
        for j in scored[1:]:
            rows.append(np.array(loop.forward([ids[j]]).logits, dtype=np.float32))
        return np.stack(rows)
    finally:
        loop.reset()  # the next answer starts from an empty cache, not from this text
