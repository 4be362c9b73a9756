"""The weights of a Llama decoder, read layer by layer from a GGUF file."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.weights import Weight, to_weight, unpermute_rope_rows


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: np.ndarray
    q: Weight  # rows in rotate-half order (un-permuted)
    k: Weight
    v: Weight
    o: Weight
    ffn_norm: np.ndarray
    gate: Weight
    up: Weight
    down: Weight


def norm_vector(model: GGUFModel, name: str) -> np.ndarray:
    return np.asarray(model.tensor(name).data, dtype=np.float32).reshape(-1)


def layer_weights(model: GGUFModel, i: int) -> LayerWeights:
    spec = model.spec

    def w(part: str) -> Weight:
        return to_weight(model.tensor(f"blk.{i}.{part}.weight"))

    return LayerWeights(
        attn_norm=norm_vector(model, f"blk.{i}.attn_norm.weight"),
        q=unpermute_rope_rows(w("attn_q"), spec.n_heads),
        k=unpermute_rope_rows(w("attn_k"), spec.n_kv_heads),
        v=w("attn_v"),
        o=w("attn_output"),
        ffn_norm=norm_vector(model, f"blk.{i}.ffn_norm.weight"),
        gate=w("ffn_gate"),
        up=w("ffn_up"),
        down=w("ffn_down"),
    )


def embedding_weight(model: GGUFModel) -> Weight:
    return to_weight(model.tensor("token_embd.weight"))


def lm_head_weight(model: GGUFModel) -> Weight:
    name = "token_embd.weight" if model.spec.tied_embeddings else "output.weight"
    return to_weight(model.tensor(name))
