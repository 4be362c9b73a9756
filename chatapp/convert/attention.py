"""The attention blocks the graph builder can emit, each with the graph inputs it needs.

Every kind takes the family's per-layer attention (ArchFeatures): RoPE tables (partial rotary,
scaled frequencies, LongRoPE's switch), sliding windows, soft-capping and the query scale.

GroupQueryAttention  com.microsoft op; RoPE inside; past and present may share one buffer.
Standard             MatMul / Softmax / Concat with RoPE in plain ops, Optimum's names and
                     dynamic shapes (present = past + new).
Static window        the standard block with fixed shapes: input_ids [1, W], attention_mask
                     [1, C], past [1, kvH, C-W, D], present [1, kvH, C, D]; positions come from
                     the mask (right-aligned ones), as in fixed-shape accelerator exports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto

from chatapp.convert.errors import ConversionError
from chatapp.convert.features import ArchFeatures, LayerAttention, plain_features
from chatapp.convert.gguf_file import DecoderSpec
from chatapp.convert.onnx_graph import MS_DOMAIN, OnnxGraph
from chatapp.convert.rope import Rope
from chatapp.folder_format.graph import DECODE_ATTENTION as DECODE_ATTENTION_OP
from chatapp.folder_format.graph import NATIVE_DOMAIN

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


def dynamic_io(spec: DecoderSpec, position_ids: bool) -> AttentionIO:
    """onnxruntime-genai / Optimum shapes: batch, new tokens and cache lengths all dynamic."""
    return AttentionIO(
        ids_shape=["batch_size", "sequence_length"],
        mask_shape=["batch_size", "total_sequence_length"],
        past_shape=["batch_size", spec.n_kv_heads, "past_sequence_length", spec.head_dim],
        present_shape=["batch_size", spec.n_kv_heads, "total_sequence_length", spec.head_dim],
        logits_shape=["batch_size", "logits_length", spec.vocab_size],
        position_ids=position_ids,
    )


class GQAAttention:
    kind = "group_query_attention"
    layout = "shared-buffer"

    def __init__(
        self,
        g: OnnxGraph,
        spec: DecoderSpec,
        context_length: int,
        features: ArchFeatures | None = None,
    ) -> None:
        self.g, self.spec, self.context_length = g, spec, context_length
        self.features = features or plain_features(spec)
        # Inside a branch of the step/prompt If (step_split.py) the presents get the branch's
        # prefix; the If's own outputs carry the graph's names.
        self.present_prefix = ""
        # In a native graph: the library's DecodeAttention instead (same inputs).
        self.decode_op = False
        # Every attention is DecodeAttention (set before `prelude`): LongRoPE's tables go to
        # it both, with no Where choosing one by the run's length.
        self.decode_only = False
        for rope in self.features.ropes:
            if rope.dims % 16:
                # The kernel wants cos/sin tables of a multiple of 8 frequencies.
                raise ConversionError(
                    f"GroupQueryAttention cannot rotate {rope.dims} of {spec.head_dim} head "
                    "dimensions (it needs a multiple of 16); convert with --attention standard."
                )

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
        self.tables = [
            plain_tables(g, rope, self.context_length)
            if self.decode_only
            else rope_tables(g, rope, self.context_length, width)
            for rope in self.features.ropes
        ]

    def __call__(self, qkv: list[str], layer: int) -> str:
        """qkv: [packed] or [q, k, v] projections [B, S, ...]; returns [B, S, heads*D].
        GroupQueryAttention, or in a native graph the library's DecodeAttention: the same
        inputs and arithmetic, a step reading only the positions a sliding window lets it see,
        a prompt's rows in a step's float order (native/decode_attention.inc)."""
        g, s = self.g, self.spec
        plan = self.features.layers[layer]
        cos, sin = self.tables[plan.rope]
        attrs: dict[str, Any] = {
            "num_heads": s.n_heads,
            "kv_num_heads": s.n_kv_heads,
            "scale": float(plan.scale),
        }
        tables: list[str] = []
        if self.decode_op:
            op, domain = DECODE_ATTENTION_OP, NATIVE_DOMAIN
            # Every attribute spelled out (a custom op has no defaults); <= 0: no window.
            attrs.update(softcap=float(plan.softcap), local_window_size=int(plan.window or -1))
            rope = self.features.ropes[plan.rope]
            if rope.long_inv_freq is not None:
                # Both tables, and the switch taken by each sequence's own length: a short
                # sequence batched beside a long one rotates as it does alone.
                cos, sin = plain_tables(g, rope, self.context_length)
                tables = list(plain_tables(g, rope, self.context_length, long=True))
                attrs["long_rope_after"] = int(rope.switch_after)
            if len(qkv) == 1:  # it takes q, k and v apart
                sizes = [s.n_heads * s.head_dim] + [s.n_kv_heads * s.head_dim] * 2
                split = g.const("qkv_sizes", np.array(sizes, np.int64))
                qkv = g.op("Split", [qkv[0], split], 3, axis=-1)
        else:
            op, domain = "GroupQueryAttention", MS_DOMAIN
            attrs.update(do_rotary=1, rotary_interleaved=0)
            if plan.softcap:
                attrs["softcap"] = float(plan.softcap)
            if plan.window:
                # Measured: the kernel lets a query see keys with query_pos - key_pos < this.
                attrs["local_window_size"] = int(plan.window)
            if len(qkv) == 1:
                qkv = [qkv[0], "", ""]
        out, _, _ = g.op(
            op,
            [
                *qkv,
                f"past_key_values.{layer}.key",
                f"past_key_values.{layer}.value",
                self.seqlens_k,
                self.total,
                cos,
                sin,
                *tables,
            ],
            [
                g.unique(f"layers.{layer}.attn/output"),
                f"{self.present_prefix}present.{layer}.key",
                f"{self.present_prefix}present.{layer}.value",
            ],
            domain=domain,
            **attrs,
        )
        return out


def plain_tables(g: OnnxGraph, rope: Rope, positions: int, long: bool = False) -> tuple[str, str]:
    """cos/sin caches [positions, dims/2] as constants (LongRoPE's long ones with `long`)."""
    cos, sin = rope.tables(positions, long=long)
    suffix = "_long" if long else ""
    return g.const(f"cos_cache{suffix}", cos), g.const(f"sin_cache{suffix}", sin)


def rope_tables(g: OnnxGraph, rope: Rope, positions: int, tokens: str) -> tuple[str, str]:
    """cos/sin caches [positions, dims/2]; LongRoPE picks its long tables once `tokens`
    (a scalar int64: the sequence length so far) passes the original context."""
    cos_name, sin_name = plain_tables(g, rope, positions)
    if rope.long_inv_freq is None:
        return cos_name, sin_name
    cos_long, sin_long = plain_tables(g, rope, positions, long=True)
    longer = g.op1("Greater", [tokens, g.const("rope_switch", np.array(rope.switch_after))])
    return (
        g.op1("Where", [longer, cos_long, cos_name]),
        g.op1("Where", [longer, sin_long, sin_name]),
    )


class StandardAttention:
    kind = "standard"
    layout = "concat"

    def __init__(
        self,
        g: OnnxGraph,
        spec: DecoderSpec,
        context_length: int,
        features: ArchFeatures | None = None,
    ) -> None:
        self.g, self.spec, self.context_length = g, spec, context_length
        self.features = features or plain_features(spec)

    def io(self) -> AttentionIO:
        return dynamic_io(self.spec, position_ids=True)

    def _positions(self, mask: str, positions: str | None) -> str:
        assert positions is not None
        return positions

    def _tokens(self, mask: str) -> str:
        """The sequence length so far (scalar int64), for LongRoPE's switch."""
        g = self.g
        return g.op1("Gather", [g.op1("Shape", [mask]), g.const("index_1", np.array(1, np.int64))])

    def prelude(self, mask: str, positions: str | None) -> None:
        g = self.g
        pos = self._positions(mask, positions)  # [B, S]
        axis1 = g.const("axes_1", np.array([1], np.int64))
        tokens = self._tokens(mask)

        def table(cache: str) -> str:
            half = g.op1("Gather", [cache, pos])  # [B, S, dims/2]
            full = g.op1("Concat", [half, half], axis=-1)  # rotate-half pairs i and i + dims/2
            return g.op1("Unsqueeze", [full, axis1])  # [B, 1, S, dims]

        self.tables = []
        for rope in self.features.ropes:
            cos, sin = rope_tables(g, rope, self.context_length, tokens)
            self.tables.append((table(cos), table(sin)))
        self.bias = self._biases(mask, pos)

    def _biases(self, mask: str, pos: str) -> dict[int, str]:
        """Per sliding window (0: none), [B, 1, S, T]: 0 where query i may see key j (causal,
        not padding, inside the window), else MASKED."""
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
        biases = {0: self._where(allowed)}
        windows = [w for w in self.features.windows if w]
        if windows:
            # Distances in positions, not slots: a static window's cache has padded slots.
            key_pos = g.op1(
                "Sub",
                [g.op1("CumSum", [mask, g.const("axis_1_scalar", np.array(1, np.int64))]), one],
            )  # [B, T]
            distance = g.op1(
                "Sub",
                [
                    g.op1("Unsqueeze", [pos, g.const("axes_1_3", np.array([1, 3], np.int64))]),
                    g.op1("Unsqueeze", [key_pos, g.const("axes_1_2", np.array([1, 2], np.int64))]),
                ],
            )  # [B, 1, S, T]
            for w in windows:
                inside = g.op1("Less", [distance, g.const("window", np.array(w, np.int64))])
                biases[w] = self._where(g.op1("And", [allowed, inside]))
        return biases

    def _where(self, allowed: str) -> str:
        g = self.g
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

    def _rope(self, x: str, index: int) -> str:
        """Rotate-half RoPE on the first `dims` dimensions of [B, H, S, D]; the rest pass."""
        g, head = self.g, self.spec.head_dim
        dims = self.features.ropes[index].dims
        cos, sin = self.tables[index]

        def part(start: int, end: int) -> str:
            return g.op1(
                "Slice",
                [
                    x,
                    g.const("slice_start", np.array([start], np.int64)),
                    g.const("slice_end", np.array([end], np.int64)),
                    g.const("axes_last", np.array([-1], np.int64)),
                ],
            )

        rotated = g.op1(
            "Concat", [g.op1("Neg", [part(dims // 2, dims)]), part(0, dims // 2)], axis=-1
        )
        turned = x if dims == head else part(0, dims)
        out = g.op1("Add", [g.op1("Mul", [turned, cos]), g.op1("Mul", [rotated, sin])])
        return out if dims == head else g.op1("Concat", [out, part(dims, head)], axis=-1)

    def __call__(self, qkv: list[str], layer: int) -> str:
        g, s = self.g, self.spec
        plan = self.features.layers[layer]
        q_proj, k_proj, v_proj = qkv if len(qkv) == 3 else self._split(qkv[0])
        q = self._rope(self._heads(q_proj, s.n_heads), plan.rope)
        k = self._rope(self._heads(k_proj, s.n_kv_heads), plan.rope)
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
        probs = g.op1(
            "Softmax", [g.op1("Add", [self._scaled(scores, plan), self.bias[plan.window]])], axis=-1
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

    def _scaled(self, scores: str, plan: LayerAttention) -> str:
        g = self.g
        scores = g.op1("Mul", [scores, g.const("attn_scale", np.array(plan.scale, np.float32))])
        if not plan.softcap:
            return scores
        cap = np.float32(plan.softcap)
        capped = g.op1(
            "Tanh", [g.op1("Mul", [scores, g.const("inv_cap", np.array(1 / cap, np.float32))])]
        )
        return g.op1("Mul", [capped, g.const("softcap", np.array(cap))])

    def _split(self, packed: str) -> list[str]:
        s = self.spec
        sizes = np.array(
            [s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim, s.n_kv_heads * s.head_dim], np.int64
        )
        return self.g.op("Split", [packed, self.g.const("qkv_sizes", sizes)], 3, axis=-1)


class StaticWindowAttention(StandardAttention):
    kind = "standard"
    layout = "static-window"

    def __init__(
        self,
        g: OnnxGraph,
        spec: DecoderSpec,
        context_length: int,
        window: int,
        features: ArchFeatures | None = None,
    ) -> None:
        super().__init__(g, spec, context_length, features)
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

    def _tokens(self, mask: str) -> str:
        """Real tokens so far: the mask's width is the fixed context here."""
        g = self.g
        counted = g.op1("ReduceSum", [mask, g.const("axis_1", np.array([1], np.int64))], keepdims=0)
        return g.op1("ReduceMax", [counted], keepdims=0)

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
