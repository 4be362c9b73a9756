"""Phi-3, Phi-3.5 and Phi-4-mini: fused QKV and gate|up, rotate-half RoPE on the first
`rope.dimension_count` dimensions of each head (Phi-4-mini: 96 of 128), and LongRoPE for the
128k models.

LongRoPE: `rope_factors_short` / `rope_factors_long` divide the frequencies; cos and sin are
scaled by `rope.scaling.attn_factor`. As in Hugging Face and onnxruntime-genai, the long
factors apply once the sequence is longer than the original context (4096), the short ones
before. llama.cpp instead picks once by its context size, so it agrees with this up to 4096
tokens whenever it runs with a context of at most 4096.
The file's sliding window is ignored, as llama.cpp does (it disabled Phi-3's window).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chatapp.convert.errors import ConversionError
from chatapp.convert.families.base import (
    QKV_BIASES,
    Family,
    ModelWeights,
    rope_attn_factor,
    rope_dims,
)
from chatapp.convert.features import ArchFeatures, LayerAttention, linear_factor
from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.rope import Rope, frequencies


class Phi3(Family):
    arch = "phi3"
    hf_architecture = "Phi3ForCausalLM"
    hf_model_type = "phi3"
    genai_type = "phi3"
    fused_gate_up = True
    layer_required = (
        "attn_norm.weight",
        "attn_output.weight",
        "ffn_norm.weight",
        "ffn_up.weight",
        "ffn_down.weight",
    )
    layer_optional = QKV_BIASES
    global_optional = ("output.weight", "rope_factors_long.weight", "rope_factors_short.weight")

    def features(self, weights: ModelWeights) -> ArchFeatures:
        model = weights.model
        spec, meta = model.spec, model.metadata
        dims = rope_dims(model, partial=True)
        attn_factor = rope_attn_factor(model)
        long = weights.optional("rope_factors_long.weight", dims // 2)
        short = weights.optional("rope_factors_short.weight", dims // 2)
        if (long is None) != (short is None):
            raise ConversionError(
                f"{model.path.name} has only one of the LongRoPE factor tensors "
                "(rope_factors_long, rope_factors_short)."
            )
        base, linear = spec.rope_theta, linear_factor(spec)
        rope = Rope(
            dims,
            frequencies(base, dims, short, linear),
            attn_factor=attn_factor,
            long_inv_freq=None if long is None else frequencies(base, dims, long, linear),
            switch_after=int(
                meta.get("phi3.rope.scaling.original_context_length", spec.context_length)
            ),
        )
        layer = LayerAttention(scale=float(1.0 / np.sqrt(spec.head_dim)))
        return ArchFeatures(ropes=(rope,), layers=(layer,) * spec.n_layers)

    def hf_extra(self, model: GGUFModel, features: ArchFeatures) -> dict[str, Any]:
        spec, rope = model.spec, features.ropes[0]
        extra: dict[str, Any] = {"partial_rotary_factor": rope.dims / spec.head_dim}
        if rope.long_inv_freq is not None:
            extra["original_max_position_embeddings"] = rope.switch_after
        return extra
