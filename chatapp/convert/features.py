"""What a decoder family adds to the plain Llama graph, as data the graph builder reads.

Weights that are present (biases, Q/K norms, post-norms) are applied where they are; this
describes the rest: RoPE tables, per-layer attention (window, soft-cap, scale), the MLP
activation, the embedding scale and the final logit soft-cap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chatapp.convert.gguf_file import DecoderSpec
from chatapp.convert.rope import Rope, frequencies

ACTIVATIONS = ("silu", "gelu_tanh")


@dataclass(frozen=True)
class LayerAttention:
    rope: int = 0  # index into ArchFeatures.ropes
    window: int = 0  # 0: every earlier token; else keys with query_pos - key_pos < window
    softcap: float = 0.0  # scores -> softcap * tanh(scores / softcap); 0: none
    scale: float = 0.0  # multiplies q.k before the soft-cap and softmax


@dataclass(frozen=True, eq=False)
class ArchFeatures:
    ropes: tuple[Rope, ...]
    layers: tuple[LayerAttention, ...]
    activation: str = "silu"  # gated MLP: act(gate) * up
    embed_scale: float = 1.0  # token embeddings are multiplied by it (Gemma: sqrt(hidden))
    final_softcap: float = 0.0  # logits -> cap * tanh(logits / cap); 0: none

    @property
    def windows(self) -> list[int]:
        """The distinct sliding windows the layers use (0 = full attention)."""
        return sorted({layer.window for layer in self.layers})


def plain_features(
    spec: DecoderSpec, rope_factors: np.ndarray | None = None, attn_factor: float = 1.0
) -> ArchFeatures:
    """A Llama decoder: one RoPE for every layer, full causal attention scaled by 1/sqrt(D)."""
    dims = spec.head_dim
    inv_freq = frequencies(spec.rope_theta, dims, rope_factors, linear_factor(spec))
    rope = Rope(dims, inv_freq, attn_factor=attn_factor)
    layer = LayerAttention(scale=float(1.0 / np.sqrt(spec.head_dim)))
    return ArchFeatures(ropes=(rope,), layers=(layer,) * spec.n_layers)


def linear_factor(spec: DecoderSpec) -> float:
    return spec.rope_scaling_factor if spec.rope_scaling_type == "linear" else 1.0
