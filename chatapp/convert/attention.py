"""The attention blocks the graph builder can emit, each with the graph inputs it needs.

GroupQueryAttention  com.microsoft op; RoPE inside; past and present may share one buffer.
Standard             MatMul / Softmax / Concat with RoPE in plain ops, Optimum's names and
                     dynamic shapes (present = past + new).
Static window        the standard block with fixed shapes: input_ids [1, W], attention_mask
                     [1, C], past [1, kvH, C-W, D], present [1, kvH, C, D]; positions come from
                     the mask (right-aligned ones), as in fixed-shape accelerator exports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from chatapp.convert.gguf_file import LlamaSpec, rope_cache
from chatapp.convert.onnx_graph import MS_DOMAIN, OnnxGraph

# Large negative instead of -inf: a fully masked row (left padding) stays finite after Softmax.
MASKED = np.float32(-1e9)


@dataclass(frozen=True)
class AttentionIO:
    """Names and shapes of the graph inputs/outputs an attention kind declares."""

    ids_shape: list[int | str]
    mask_shape: list[int | str]
    past_shape: list[int | str]
    present_shape: list[int | str]
    logits_shape: list[int | str]
    position_ids: bool


def dynamic_io(spec: LlamaSpec, position_ids: bool) -> AttentionIO:
    """onnxruntime-genai / Optimum shapes: batch, new tokens and cache lengths all dynamic."""
    return AttentionIO(
        ids_shape=["batch_size", "sequence_length"],
        mask_shape=["batch_size", "total_sequence_length"],
        past_shape=["batch_size", spec.n_kv_heads, "past_sequence_length", spec.head_dim],
        present_shape=["batch_size", spec.n_kv_heads, "total_sequence_length", spec.head_dim],
        logits_shape=["batch_size", "sequence_length", spec.vocab_size],
        position_ids=position_ids,
    )


class GQAAttention:
    kind = "group_query_attention"
    layout = "shared-buffer"

    def __init__(self, g: OnnxGraph, spec: LlamaSpec, context_length: int) -> None:
        self.g, self.spec, self.context_length = g, spec, context_length

    def io(self) -> AttentionIO:
        return dynamic_io(self.spec, position_ids=False)

    def prelude(self, mask: str, positions: str | None) -> None:
        """seqlens_k = tokens so far - 1, total length, and the RoPE tables (shared by layers)."""
        g = self.g
        mask_sum = g.op1(
            "ReduceSum", [mask, g.const("axis_1", np.array([1], np.int64))], keepdims=0
        )
        self.seqlens_k = g.op1(
            "Cast",
            [g.op1("Sub", [mask_sum, g.const("one_i64", np.array(1, np.int64))])],
            to=TensorProto.INT32,
        )
        width = g.op1("Gather", [g.op1("Shape", [mask]), g.const("index_1", np.array(1, np.int64))])
        self.total = g.op1("Cast", [width], to=TensorProto.INT32)
        cos, sin = rope_cache(self.spec, self.context_length)
        self.cos, self.sin = g.const("cos_cache", cos), g.const("sin_cache", sin)

    def __call__(self, qkv: list[str], layer: int) -> str:
        """qkv: [packed] or [q, k, v] projections [B, S, ...]; returns [B, S, heads*D]."""
        g, s = self.g, self.spec
        inputs = qkv if len(qkv) == 3 else [qkv[0], "", ""]
        out, _, _ = g.op(
            "GroupQueryAttention",
            [
                *inputs,
                f"past_key_values.{layer}.key",
                f"past_key_values.{layer}.value",
                self.seqlens_k,
                self.total,
                self.cos,
                self.sin,
            ],
            [
                g.unique(f"layers.{layer}.attn/output"),
                f"present.{layer}.key",
                f"present.{layer}.value",
            ],
            domain=MS_DOMAIN,
            num_heads=s.n_heads,
            kv_num_heads=s.n_kv_heads,
            do_rotary=1,
            rotary_interleaved=0,
            scale=float(1.0 / np.sqrt(s.head_dim)),
        )
        return out


class StandardAttention:
    kind = "standard"
    layout = "concat"

    def __init__(self, g: OnnxGraph, spec: LlamaSpec, context_length: int) -> None:
        self.g, self.spec, self.context_length = g, spec, context_length

    def io(self) -> AttentionIO:
        return dynamic_io(self.spec, position_ids=True)

    def _positions(self, mask: str, positions: str | None) -> str:
        assert positions is not None
        return positions

    def prelude(self, mask: str, positions: str | None) -> None:
        g = self.g
        half_cos, half_sin = rope_cache(self.spec, self.context_length)
        pos = self._positions(mask, positions)  # [B, S]
        axis1 = g.const("axes_1", np.array([1], np.int64))

        def table(name: str, values: np.ndarray) -> str:
            half = g.op1("Gather", [g.const(name, values), pos])  # [B, S, D/2]
            full = g.op1("Concat", [half, half], axis=-1)  # rotate-half pairs i and i + D/2
            return g.op1("Unsqueeze", [full, axis1])  # [B, 1, S, D]

        self.cos, self.sin = table("cos_cache", half_cos), table("sin_cache", half_sin)
        self.bias = self._bias(mask)

    def _bias(self, mask: str) -> str:
        """[B, 1, S, T]: 0 where query i may see key j (causal and not padding), else MASKED."""
        g = self.g
        zero = g.const("zero_i64", np.array(0, np.int64))
        one = g.const("one_i64", np.array(1, np.int64))
        total = g.op1("Gather", [g.op1("Shape", [mask]), g.const("index_1", np.array(1, np.int64))])
        seq = g.op1(
            "Gather", [g.op1("Shape", [self._ids]), g.const("index_1", np.array(1, np.int64))]
        )
        keys = g.op1("Range", [zero, total, one])  # [T]
        queries = g.op1("Range", [g.op1("Sub", [total, seq]), total, one])  # absolute [S]
        causal = g.op1(
            "LessOrEqual",
            [
                g.op1("Unsqueeze", [keys, g.const("axes_0", np.array([0], np.int64))]),
                g.op1("Unsqueeze", [queries, g.const("axes_1", np.array([1], np.int64))]),
            ],
        )  # [S, T]
        visible = g.op1(
            "Unsqueeze",
            [
                g.op1("Cast", [mask], to=TensorProto.BOOL),
                g.const("axes_1_2", np.array([1, 2], np.int64)),
            ],
        )  # [B,1,1,T]
        allowed = g.op1("And", [causal, visible])  # [B, 1, S, T]
        return g.op1(
            "Where",
            [
                allowed,
                g.const("zero_f", np.array(0.0, np.float32)),
                g.const("masked_f", np.array(MASKED)),
            ],
        )

    def bind_ids(self, ids: str) -> None:
        self._ids = ids

    def _heads(self, x: str, n: int) -> str:
        """[B, S, n*D] -> [B, n, S, D]."""
        g, d = self.g, self.spec.head_dim
        shaped = g.op1(
            "Reshape", [x, g.const(f"shape_heads_{n}", np.array([0, 0, n, d], np.int64))]
        )
        return g.op1("Transpose", [shaped], perm=[0, 2, 1, 3])

    def _rope(self, x: str) -> str:
        g, half = self.g, self.spec.head_dim // 2
        axis = g.const("axes_last", np.array([-1], np.int64))
        first = g.op1(
            "Slice",
            [
                x,
                g.const("zero_1", np.array([0], np.int64)),
                g.const("half_1", np.array([half], np.int64)),
                axis,
            ],
        )
        second = g.op1(
            "Slice",
            [
                x,
                g.const("half_1", np.array([half], np.int64)),
                g.const("end_1", np.array([self.spec.head_dim], np.int64)),
                axis,
            ],
        )
        rotated = g.op1("Concat", [g.op1("Neg", [second]), first], axis=-1)
        return g.op1("Add", [g.op1("Mul", [x, self.cos]), g.op1("Mul", [rotated, self.sin])])

    def __call__(self, qkv: list[str], layer: int) -> str:
        g, s = self.g, self.spec
        q_proj, k_proj, v_proj = qkv if len(qkv) == 3 else self._split(qkv[0])
        q = self._rope(self._heads(q_proj, s.n_heads))
        k = self._rope(self._heads(k_proj, s.n_kv_heads))
        v = self._heads(v_proj, s.n_kv_heads)
        key = g.op("Concat", [f"past_key_values.{layer}.key", k], [f"present.{layer}.key"], axis=2)[
            0
        ]
        value = g.op(
            "Concat", [f"past_key_values.{layer}.value", v], [f"present.{layer}.value"], axis=2
        )[0]
        # Grouped heads without repeating K/V: fold each group's queries into one [kvH, g*S, D].
        grouped = g.op1(
            "Reshape",
            [q, g.const("shape_grouped", np.array([0, s.n_kv_heads, -1, s.head_dim], np.int64))],
        )
        scores = g.op1("MatMul", [grouped, g.op1("Transpose", [key], perm=[0, 1, 3, 2])])
        scores = g.op1(
            "Reshape", [scores, g.const("shape_scores", np.array([0, s.n_heads, -1, 0], np.int64))]
        )
        scale = g.const("attn_scale", np.array(1.0 / np.sqrt(s.head_dim), np.float32))
        probs = g.op1(
            "Softmax", [g.op1("Add", [g.op1("Mul", [scores, scale]), self.bias])], axis=-1
        )
        probs = g.op1(
            "Reshape",
            [probs, g.const("shape_grouped_probs", np.array([0, s.n_kv_heads, -1, 0], np.int64))],
        )
        context = g.op1("MatMul", [probs, value])  # [B, kvH, g*S, D]
        context = g.op1(
            "Reshape",
            [
                context,
                g.const("shape_heads_out", np.array([0, s.n_heads, -1, s.head_dim], np.int64)),
            ],
        )
        context = g.op1("Transpose", [context], perm=[0, 2, 1, 3])
        return g.op1(
            "Reshape",
            [context, g.const("shape_merge", np.array([0, 0, s.n_heads * s.head_dim], np.int64))],
        )

    def _split(self, packed: str) -> list[str]:
        s = self.spec
        sizes = np.array(
            [s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim, s.n_kv_heads * s.head_dim], np.int64
        )
        return self.g.op("Split", [packed, self.g.const("qkv_sizes", sizes)], 3, axis=-1)


class StaticWindowAttention(StandardAttention):
    kind = "standard"
    layout = "static-window"

    def __init__(self, g: OnnxGraph, spec: LlamaSpec, context_length: int, window: int) -> None:
        super().__init__(g, spec, context_length)
        if not 0 < window < context_length:
            raise ValueError("the window must be at least 1 and shorter than the context")
        self.window = window

    def io(self) -> AttentionIO:
        s, c, w = self.spec, self.context_length, self.window
        return AttentionIO(
            ids_shape=[1, w],
            mask_shape=[1, c],
            past_shape=[1, s.n_kv_heads, c - w, s.head_dim],
            present_shape=[1, s.n_kv_heads, c, s.head_dim],
            logits_shape=[1, w, s.vocab_size],
            position_ids=False,
        )

    def _positions(self, mask: str, positions: str | None) -> str:
        """Each slot's position is the number of real tokens before it (right-aligned mask)."""
        g = self.g
        counted = g.op1("CumSum", [mask, g.const("axis_1_scalar", np.array(1, np.int64))])
        slots = g.op1("Sub", [counted, g.const("one_i64", np.array(1, np.int64))])
        last = g.op1(
            "Slice",
            [
                slots,
                g.const("window_start", np.array([-self.window], np.int64)),
                g.const("window_end", np.array([self.context_length], np.int64)),
                g.const("axes_1", np.array([1], np.int64)),
            ],
        )
        return g.op1("Max", [last, g.const("zero_i64", np.array(0, np.int64))])  # padding -> 0
