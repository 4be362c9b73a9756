"""Qwen 2 / 2.5 (Q/K/V biases) and Qwen 3 (per-head RMSNorm of Q and K before RoPE).

llama.cpp stores their Q/K rows as Hugging Face does (rotate-half RoPE): nothing to
un-permute. RoPE base, head size (`attention.key_length`) and the rest come from the file.
"""

from __future__ import annotations

from typing import ClassVar

from chatapp.convert.families.base import (
    QKV_BIASES,
    Family,
    ModelWeights,
    rope_attn_factor,
    rope_dims,
)
from chatapp.convert.features import ArchFeatures, plain_features


class Qwen2(Family):
    arch = "qwen2"
    hf_architecture = "Qwen2ForCausalLM"
    hf_model_type = "qwen2"
    genai_type = "qwen2"
    layer_optional: ClassVar[tuple[str, ...]] = QKV_BIASES

    def features(self, weights: ModelWeights) -> ArchFeatures:
        model = weights.model
        rope_dims(model)  # all of each head
        return plain_features(model.spec, attn_factor=rope_attn_factor(model))


class Qwen3(Qwen2):
    arch = "qwen3"
    hf_architecture = "Qwen3ForCausalLM"
    hf_model_type = "qwen3"
    genai_type = "qwen3"
    layer_required = (*Family.layer_required, "attn_q_norm.weight", "attn_k_norm.weight")
    layer_optional = ()
