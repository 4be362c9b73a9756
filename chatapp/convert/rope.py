"""Rotary position embeddings: per-frequency angles and the cos/sin tables the graph consumes.

Every family's RoPE ends up as frequencies for the rotate-half form (pairs i and i + dims/2 of
the first `dims` head dimensions); what differs is how the frequencies are scaled:
    linear        positions divided by a factor (frequencies divided by it),
    Llama 3       per-frequency factors from `rope_freqs.weight` (frequency / factor),
    LongRoPE      Phi-3's short and long factor tensors, switched by sequence length, and an
                  attention factor that scales cos and sin.
GroupQueryAttention takes the tables as inputs, so every scaling is baked into them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Rope:
    dims: int  # rotated dimensions of each head (the rest pass through)
    inv_freq: np.ndarray  # float64 [dims/2], scaling applied
    attn_factor: float = 1.0  # cos and sin are multiplied by it (LongRoPE)
    long_inv_freq: np.ndarray | None = None  # LongRoPE: used once a sequence is longer than
    switch_after: int = 0  # this many tokens (the model's original context)

    def tables(self, positions: int, long: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin float32 [positions, dims/2]."""
        inv = self.long_inv_freq if long and self.long_inv_freq is not None else self.inv_freq
        angles = np.outer(np.arange(positions, dtype=np.float64), inv)
        scale = self.attn_factor
        return (np.cos(angles) * scale).astype(np.float32), (np.sin(angles) * scale).astype(
            np.float32
        )


def frequencies(
    base: float, dims: int, factors: np.ndarray | None = None, linear: float = 1.0
) -> np.ndarray:
    """base^(-2i/dims) for i < dims/2, divided by per-frequency factors and a linear factor."""
    inv = 1.0 / base ** (np.arange(0, dims, 2, dtype=np.float64) / dims)
    if factors is not None:
        inv = inv / np.asarray(factors, dtype=np.float64)
    return inv / linear
