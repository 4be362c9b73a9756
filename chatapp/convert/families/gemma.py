"""Gemma 2 and Gemma 3, as llama.cpp's graphs for them compute.

Both: embeddings times sqrt(hidden), RMSNorm weights already stored as (1 + w) by llama.cpp's
converter (so used as they are), a norm on each sub-layer's output before the residual add,
GELU-tanh gated MLP, sliding-window attention on some layers, and a query scale of
1/sqrt(query_pre_attn_scalar), which llama.cpp derives from the layer count (the 27B models
use hidden/heads, the others the head size).
Gemma 2: every other layer (0, 2, ...) local; attention and final logit soft-capping.
Gemma 3: five local layers then one global; Q/K RMSNorm; local layers have their own RoPE base
(10000) without the global layers' scaling; no soft-capping unless the file sets one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chatapp.convert.families.base import Family, ModelWeights, rope_attn_factor, rope_dims
from chatapp.convert.features import ArchFeatures, LayerAttention, linear_factor
from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.rope import Rope, frequencies


class Gemma2(Family):
    arch = "gemma2"
    hf_architecture = "Gemma2ForCausalLM"
    hf_model_type = "gemma2"
    genai_type = "gemma2"
    layer_required = (
        *Family.layer_required,
        "post_attention_norm.weight",
        "post_ffw_norm.weight",
    )
    # llama.cpp's defaults when the file leaves them out.
    default_window = 4096
    default_pattern = 2
    default_attn_softcap = 50.0
    default_final_softcap = 30.0
    local_rope_base: float | None = None  # None: the global base
    local_rope_scaled = True  # local layers share the global linear RoPE scaling
    layers_27b = 46

    def features(self, weights: ModelWeights) -> ArchFeatures:
        model = weights.model
        spec, meta = model.spec, model.metadata
        key = f"{self.arch}."
        dims = rope_dims(model)
        window = int(meta.get(key + "attention.sliding_window", self.default_window) or 0)
        local = self.local_layers(model) if window else [False] * spec.n_layers
        factor, linear = rope_attn_factor(model), linear_factor(spec)
        global_rope = Rope(dims, frequencies(spec.rope_theta, dims, linear=linear), factor)
        local_base = float(
            meta.get(key + "rope.freq_base_swa", self.local_rope_base or spec.rope_theta)
        )
        local_linear = linear if self.local_rope_scaled else 1.0
        local_rope = Rope(dims, frequencies(local_base, dims, linear=local_linear), factor)
        softcap = float(meta.get(key + "attn_logit_softcapping", self.default_attn_softcap) or 0)
        scale = float(1.0 / np.sqrt(self.query_pre_attn_scalar(model)))
        layers = tuple(
            LayerAttention(
                rope=1 if is_local else 0,
                window=window if is_local else 0,
                softcap=softcap,
                scale=scale,
            )
            for is_local in local
        )
        final = float(meta.get(key + "final_logit_softcapping", self.default_final_softcap) or 0)
        return ArchFeatures(
            ropes=(global_rope, local_rope),
            layers=layers,
            activation="gelu_tanh",
            embed_scale=float(np.sqrt(np.float32(spec.hidden_size))),
            final_softcap=final,
        )

    def local_layers(self, model: GGUFModel) -> list[bool]:
        """Which layers use the sliding window: a period n (the last of every n is global)
        or llama.cpp's per-layer list."""
        n = model.spec.n_layers
        pattern = model.metadata.get(f"{self.arch}.attention.sliding_window_pattern")
        if isinstance(pattern, (list, tuple)):
            return [bool(x) for x in pattern][:n] + [False] * max(0, n - len(pattern))
        period = int(pattern) if pattern else self.default_pattern
        return [period > 0 and i % period < period - 1 for i in range(n)]

    def query_pre_attn_scalar(self, model: GGUFModel) -> int:
        spec = model.spec
        if spec.n_layers == self.layers_27b:
            return spec.hidden_size // spec.n_heads
        return spec.head_dim

    def hf_extra(self, model: GGUFModel, features: ArchFeatures) -> dict[str, Any]:
        windows = [layer.window for layer in features.layers if layer.window]
        return {
            "hidden_activation": "gelu_pytorch_tanh",
            "query_pre_attn_scalar": self.query_pre_attn_scalar(model),
            "sliding_window": windows[0] if windows else None,
            "attn_logit_softcapping": features.layers[0].softcap or None,
            "final_logit_softcapping": features.final_softcap or None,
        }


class Gemma3(Gemma2):
    arch = "gemma3"
    hf_architecture = "Gemma3ForCausalLM"
    hf_model_type = "gemma3_text"
    genai_type = "gemma3_text"
    layer_required = (*Gemma2.layer_required, "attn_q_norm.weight", "attn_k_norm.weight")
    default_window = 0
    default_pattern = 6
    default_attn_softcap = 0.0
    default_final_softcap = 0.0
    local_rope_base = 10000.0
    local_rope_scaled = False
    layers_27b = 62

    def hf_extra(self, model: GGUFModel, features: ArchFeatures) -> dict[str, Any]:
        extra = super().hf_extra(model, features)
        extra["rope_local_base_freq"] = float(
            model.metadata.get("gemma3.rope.freq_base_swa", self.local_rope_base)
        )
        return extra
