"""An independent numpy forward pass of every supported family, read straight from the GGUF.

Nothing here uses the converter: tensors come from gguf-py's reader and dequantizer, the
hyper-parameters from the metadata by llama.cpp's keys, and each family follows llama.cpp's
graph for it (src/models/*.cpp). RoPE rotates llama.cpp's own pairs (adjacent ones for
'llama', whose Q/K rows llama.cpp permuted, so the converter's un-permutation is checked too),
attention runs over the whole sequence without a cache, activations are float64 (the
dequantized weights are held as float32, the values gguf-py's dequantizer and llama.cpp compute,
and widened to float64 in each product).

The converter's tests check the converter against it; the fidelity measurement
(session/fidelity.py, `chatapp bench --fidelity`) compares the engine's logits with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

from chatapp.convert.gguf_file import GGUFModel

QType = gguf.GGMLQuantizationType
# llama.cpp's rope type per architecture: NORM rotates pairs (2i, 2i+1), NEOX (i, i + dims/2).
INTERLEAVED_ROPE = {"llama"}


def _read(source: GGUFModel | Path | str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Metadata and dequantized tensors; a GGUFModel lends its parsed header (reading the
    header of a big vocabulary takes seconds), the values come from gguf-py's dequantizer."""
    if isinstance(source, GGUFModel):
        meta = source.metadata
        raw = [
            (t.name, t.shape, t.data, QType.__members__[t.qtype]) for t in source.tensors.values()
        ]
    else:
        reader = gguf.GGUFReader(source)
        meta = {k: f.contents() for k, f in reader.fields.items() if f.types}
        raw = [
            (t.name, tuple(int(d) for d in reversed(t.shape.tolist())), t.data, t.tensor_type)
            for t in reader.tensors
        ]
    tensors = {
        name: np.asarray(gguf.quants.dequantize(data, qtype), dtype=np.float32).reshape(shape)
        for name, shape, data, qtype in raw
    }
    return meta, tensors


class ReferenceModel:
    def __init__(self, source: GGUFModel | Path | str) -> None:
        meta, self.t = _read(source)
        self.arch = arch = str(meta["general.architecture"])

        def key(name: str, default: Any = None) -> Any:
            return meta.get(f"{arch}.{name}", default)

        self.n_layers = int(key("block_count"))
        self.hidden = int(key("embedding_length"))
        self.n_heads = int(key("attention.head_count"))
        self.n_kv = int(key("attention.head_count_kv", self.n_heads))
        self.head_dim = int(key("attention.key_length", self.hidden // self.n_heads))
        self.eps = float(key("attention.layer_norm_rms_epsilon"))
        self.rope_dims = int(key("rope.dimension_count", self.head_dim))
        self.rope_base = float(key("rope.freq_base", 10000.0))
        self.rope_scale = 1.0
        if key("rope.scaling.type") == "linear":
            self.rope_scale = 1.0 / float(key("rope.scaling.factor", 1.0))
        self.attn_factor = float(key("rope.scaling.attn_factor", 1.0))
        self.original_context = int(key("rope.scaling.original_context_length", 0) or 0)
        self.embed = self.t["token_embd.weight"]
        self.head = self.t.get("output.weight", self.embed)
        self.gemma = arch in ("gemma2", "gemma3")
        self.window = 0
        self.local = [False] * self.n_layers
        self.attn_softcap = self.final_softcap = 0.0
        self.scale = 1.0 / np.sqrt(self.head_dim)
        if self.gemma:
            self._gemma(key)

    def _gemma(self, key: Any) -> None:
        gemma3 = self.arch == "gemma3"
        self.window = int(key("attention.sliding_window", 0 if gemma3 else 4096))
        pattern = key("attention.sliding_window_pattern", 6 if gemma3 else 2)
        if isinstance(pattern, list):
            self.local = [bool(self.window) and bool(x) for x in pattern]
        else:
            n = int(pattern)
            self.local = [bool(self.window) and i % n < n - 1 for i in range(self.n_layers)]
        self.attn_softcap = float(key("attn_logit_softcapping", 0.0 if gemma3 else 50.0))
        self.final_softcap = float(key("final_logit_softcapping", 0.0 if gemma3 else 30.0))
        self.local_base = float(key("rope.freq_base_swa", 10000.0 if gemma3 else self.rope_base))
        self.local_scale = 1.0 if gemma3 else self.rope_scale
        big = self.n_layers == (62 if gemma3 else 46)  # the 27B models
        self.scale = 1.0 / np.sqrt(self.hidden / self.n_heads if big else self.head_dim)

    # -- pieces ----------------------------------------------------------------------------
    def _rms(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return np.asarray(x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w)

    def _angles(self, layer: int, t: int) -> np.ndarray:
        """[t, dims/2] rotation angles of llama.cpp's ggml_rope_ext (ext_factor 0)."""
        base, scale = self.rope_base, self.rope_scale
        if self.gemma and self.local[layer]:
            base, scale = self.local_base, self.local_scale
        inv = base ** (-np.arange(0, self.rope_dims, 2, dtype=np.float64) / self.rope_dims)
        if "rope_freqs.weight" in self.t:
            inv = inv / self.t["rope_freqs.weight"]
        if "rope_factors_short.weight" in self.t:
            longer = self.original_context and t > self.original_context
            inv = (
                inv / self.t["rope_factors_long.weight" if longer else "rope_factors_short.weight"]
            )
        return np.outer(np.arange(t, dtype=np.float64), inv * scale)

    def _rope(self, x: np.ndarray, angles: np.ndarray) -> np.ndarray:
        """x: [T, heads, D]; the first rope_dims dimensions rotate."""
        d = self.rope_dims
        cos = (np.cos(angles) * self.attn_factor)[:, None, :]
        sin = (np.sin(angles) * self.attn_factor)[:, None, :]
        out = x.copy()
        if self.arch in INTERLEAVED_ROPE:
            a, b = x[..., 0:d:2], x[..., 1:d:2]
            out[..., 0:d:2], out[..., 1:d:2] = a * cos - b * sin, a * sin + b * cos
        else:
            a, b = x[..., : d // 2], x[..., d // 2 : d]
            out[..., : d // 2], out[..., d // 2 : d] = a * cos - b * sin, a * sin + b * cos
        return out

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = x @ self.t[name + ".weight"].T
        return np.asarray(y + self.t[name + ".bias"] if name + ".bias" in self.t else y)

    def _qkv(self, h: np.ndarray, p: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t, d = h.shape[0], self.head_dim
        if p + "attn_qkv.weight" in self.t:
            fused = self._linear(h, p + "attn_qkv")
            q_rows, kv_rows = self.n_heads * d, self.n_kv * d
            q, k, v = np.split(fused, [q_rows, q_rows + kv_rows], axis=-1)
        else:
            q, k, v = (self._linear(h, p + part) for part in ("attn_q", "attn_k", "attn_v"))
        return q.reshape(t, -1, d), k.reshape(t, -1, d), v.reshape(t, -1, d)

    def _attention(self, h: np.ndarray, layer: int) -> np.ndarray:
        p, t = f"blk.{layer}.", h.shape[0]
        q, k, v = self._qkv(h, p)
        if p + "attn_q_norm.weight" in self.t:
            q = self._rms(q, self.t[p + "attn_q_norm.weight"])
            k = self._rms(k, self.t[p + "attn_k_norm.weight"])
        angles = self._angles(layer, t)
        q, k = self._rope(q, angles), self._rope(k, angles)
        group = self.n_heads // self.n_kv
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) * self.scale
        if self.attn_softcap:
            scores = self.attn_softcap * np.tanh(scores / self.attn_softcap)
        i, j = np.arange(t)[:, None], np.arange(t)[None, :]
        visible = j <= i
        if self.local[layer]:
            visible &= i - j < self.window
        scores = np.where(visible, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        out = np.einsum("hqk,khd->qhd", probs, v).reshape(t, -1)
        return self._linear(out, p + "attn_output")

    def _mlp(self, h: np.ndarray, layer: int) -> np.ndarray:
        p = f"blk.{layer}."
        if p + "ffn_gate.weight" in self.t:
            gate, up = self._linear(h, p + "ffn_gate"), self._linear(h, p + "ffn_up")
        else:  # Phi-3: one tensor, gate first
            gate, up = np.split(self._linear(h, p + "ffn_up"), 2, axis=-1)
        if self.gemma:
            c = np.sqrt(2.0 / np.pi)
            act = 0.5 * gate * (1.0 + np.tanh(c * (gate + 0.044715 * gate**3)))
        else:
            act = gate / (1.0 + np.exp(-gate))
        return self._linear(act * up, p + "ffn_down")

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits [T, vocab] for every position of one sequence."""
        x = self.embed[np.asarray(ids)].astype(np.float64)
        if self.gemma:
            x = x * np.float32(np.sqrt(np.float32(self.hidden)))
        for i in range(self.n_layers):
            p = f"blk.{i}."
            a = self._attention(self._rms(x, self.t[p + "attn_norm.weight"]), i)
            if p + "post_attention_norm.weight" in self.t:
                a = self._rms(a, self.t[p + "post_attention_norm.weight"])
            x = x + a
            f = self._mlp(self._rms(x, self.t[p + "ffn_norm.weight"]), i)
            if p + "post_ffw_norm.weight" in self.t:
                f = self._rms(f, self.t[p + "post_ffw_norm.weight"])
            x = x + f
        out = self._rms(x, self.t["output_norm.weight"]) @ self.head.T
        if self.final_softcap:
            out = self.final_softcap * np.tanh(out / self.final_softcap)
        return np.asarray(out)

    def greedy(self, ids: list[int], steps: int) -> list[int]:
        """The next `steps` greedy tokens (a full pass per token)."""
        ids = list(ids)
        for _ in range(steps):
            ids.append(int(self.logits(ids)[-1].argmax()))
        return ids[len(ids) - steps :]


# The name other branches' tests import (this reference covered Llama only before).
ReferenceLlama = ReferenceModel
