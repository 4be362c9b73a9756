"""The weights of one decoder layer, as the graph builder consumes them.

The families (chatapp/convert/families/) read them from the GGUF file; optional parts are
None when a family or file has none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chatapp.convert.weights import Weight


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: np.ndarray
    q: Weight  # rows in rotate-half order (un-permuted for llama files)
    k: Weight
    v: Weight
    o: Weight
    ffn_norm: np.ndarray
    gate: Weight
    up: Weight
    down: Weight
    q_bias: np.ndarray | None = None
    k_bias: np.ndarray | None = None
    v_bias: np.ndarray | None = None
    o_bias: np.ndarray | None = None
    gate_bias: np.ndarray | None = None
    up_bias: np.ndarray | None = None
    down_bias: np.ndarray | None = None
    q_norm: np.ndarray | None = None  # per-head RMSNorm before RoPE (Qwen 3, Gemma 3) [D]
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # RMSNorm of each sub-layer's output (Gemma)
    post_ffn_norm: np.ndarray | None = None
