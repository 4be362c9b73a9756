"""An independent numpy forward pass of a Llama decoder, from the dequantized weights.

It uses plain attention over the full sequence (no cache, no ONNX Runtime), so agreement with
the ONNX model checks the graph, the weight layouts, RoPE and the KV plumbing together.
"""

from __future__ import annotations

import numpy as np

from chatapp.convert.gguf_file import GGUFModel, rope_cache
from chatapp.convert.llama_weights import (
    embedding_weight,
    layer_weights,
    lm_head_weight,
    norm_vector,
)


class ReferenceLlama:
    def __init__(self, model: GGUFModel) -> None:
        self.spec = model.spec
        self.embed = embedding_weight(model).dequantize()
        self.head = lm_head_weight(model).dequantize()
        self.final_norm = norm_vector(model, "output_norm.weight")
        self.layers = []
        for i in range(self.spec.n_layers):
            lw = layer_weights(model, i)
            self.layers.append(
                {
                    "attn_norm": lw.attn_norm,
                    "ffn_norm": lw.ffn_norm,
                    **{
                        p: getattr(lw, p).dequantize()
                        for p in ("q", "k", "v", "o", "gate", "up", "down")
                    },
                }
            )

    def _rms(self, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        var = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
        return (x / np.sqrt(var + self.spec.rms_eps) * w).astype(np.float32)

    def _rope(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        # x: [heads, T, D]; rotate-half form
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)

    def logits(self, ids: list[int]) -> np.ndarray:
        """Logits [T, vocab] for every position of one sequence."""
        s = self.spec
        t = len(ids)
        cos, sin = rope_cache(s, t)
        x = self.embed[np.asarray(ids)]
        causal = np.triu(np.full((t, t), -np.inf, dtype=np.float32), k=1)
        group = s.n_heads // s.n_kv_heads
        for lw in self.layers:
            h = self._rms(x, lw["attn_norm"])
            q = (h @ lw["q"].T).reshape(t, s.n_heads, s.head_dim).transpose(1, 0, 2)
            k = (h @ lw["k"].T).reshape(t, s.n_kv_heads, s.head_dim).transpose(1, 0, 2)
            v = (h @ lw["v"].T).reshape(t, s.n_kv_heads, s.head_dim).transpose(1, 0, 2)
            q, k = self._rope(q, cos, sin), self._rope(k, cos, sin)
            k, v = np.repeat(k, group, axis=0), np.repeat(v, group, axis=0)
            scores = q @ k.transpose(0, 2, 1) / np.sqrt(s.head_dim) + causal
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            attn = (probs @ v).transpose(1, 0, 2).reshape(t, -1)
            x = x + attn @ lw["o"].T
            h = self._rms(x, lw["ffn_norm"])
            gate, up = h @ lw["gate"].T, h @ lw["up"].T
            x = x + ((gate / (1 + np.exp(-gate))) * up) @ lw["down"].T
        return self._rms(x, self.final_norm) @ self.head.T
