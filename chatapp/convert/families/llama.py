"""Llama 2/3.x, SmolLM, TinyLlama, Mistral 7B/Nemo (their files say 'llama')."""

from __future__ import annotations

from chatapp.convert.families.base import (
    FFN_BIASES,
    QKV_BIASES,
    Family,
    ModelWeights,
    rope_attn_factor,
    rope_dims,
)
from chatapp.convert.features import ArchFeatures, plain_features


class Llama(Family):
    arch = "llama"
    hf_architecture = "LlamaForCausalLM"
    hf_model_type = "llama"
    genai_type = "llama"
    rope_rows_interleaved = True
    layer_optional = (*QKV_BIASES, "attn_output.bias", *FFN_BIASES)
    # Llama 3.1+ files carry the per-frequency RoPE factors of their 'llama3' rope scaling.
    global_optional = ("output.weight", "rope_freqs.weight")

    def features(self, weights: ModelWeights) -> ArchFeatures:
        model = weights.model
        factors = weights.optional("rope_freqs.weight", rope_dims(model) // 2)
        return plain_features(model.spec, factors, rope_attn_factor(model))
