"""Build the ONNX graph of a Llama-style decoder with the onnxruntime-genai signature.

The families (chatapp/convert/families/) describe what they add (ArchFeatures); weights that
are present (biases, Q/K norms, post-norms) are applied where they are.

Inputs:  input_ids [B,S] int64, attention_mask [B,T] int64, (position_ids [B,S] for standard
         attention), past_key_values.{i}.key|value [B, kv_heads, P, head_dim] float32
Optional: logits_positions [K] int64, which of the S new positions get logits (the loops feed
         the last, so a prompt costs one row of lm_head, not S). Also an initializer, empty,
         meaning all S: tools that do not feed it (onnxruntime-genai) get [B,S,vocab] as before.
Outputs: logits [B,K,vocab] float32 (static window: [B,S,vocab]), present.{i}.key|value
The attention block (attention.py) decides the KV layout: GroupQueryAttention (one shared
buffer), standard ops (concat), or a fixed-shape static window.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from chatapp.convert.attention import GQAAttention, StandardAttention, StaticWindowAttention
from chatapp.convert.decoder_weights import LayerWeights
from chatapp.convert.features import ArchFeatures, plain_features
from chatapp.convert.gguf_blocks import GgufWeight
from chatapp.convert.gguf_file import DecoderSpec
from chatapp.convert.int8_levels import (
    LEVELS,
    STEP_LEVELS,
    block_sums,
    blocked,
    int8_levels_apply,
    level_rows,
    level_rows_by_run,
    levels_product,
    nbits_inputs,
)
from chatapp.convert.native_graph import native_gather, native_matmul
from chatapp.convert.nibble_split import two_nibbles
from chatapp.convert.onnx_graph import MS_DOMAIN, OnnxGraph
from chatapp.convert.prompt_dequant import dequantized_matmul
from chatapp.convert.quant_embedding import embed_tokens
from chatapp.convert.step_split import branch, single_token
from chatapp.convert.weights import FloatWeight, NBitsWeight, Weight, concat_rows
from chatapp.folder_format.graph import STEP_OR_PROMPT_NODE

Progress = Callable[[float, str], None]
LOGITS_POSITIONS = "logits_positions"


@dataclass(frozen=True)
class GraphOptions:
    context_length: int
    # MatMulNBits accuracy_level: 0 keeps activations float32 (exact); 4 quantizes them to int8
    # per block, about 25% faster per token but it changes answers (docs/converter.md).
    accuracy_level: int = 0
    # The output projection as a float32 MatMul (exact) or as 8-bit MatMulNBits with int8
    # activations (3 ms/token faster on the default model, 98% top-1 agreement).
    lm_head_int8: bool = False
    # Exact int8 levels (int8_levels.py) in the layers' projections: "decode" in single-token
    # steps only (two levels; prompts keep the float kernel, step_split.py), "all" in every run
    # (three levels; a long prompt ~2.8x slower), "head" in the output projection only.
    int8_levels: str = "decode"
    attention: str = "gqa"  # "gqa" (GroupQueryAttention) | "standard" (plain ONNX ops)
    static_window: int | None = None  # fixed-shape export: tokens per run (implies standard)


@dataclass
class LayerPath:
    """One path through the layers: its running tensors, its levels, and where its nodes go
    (None: this graph; a list: the body of a branch of the step/prompt If)."""

    hidden: str
    residual: str
    levels: int
    nodes: list[onnx.NodeProto] | None = None
    prefix: str = ""
    # The prompt path of a split graph: 8-bit weights dequantized at run time from the step
    # path's codes (prompt_dequant.py) instead of a second copy as 4-bit halves.
    dequantize_8bit: bool = False
    # A native graph's step path: attention by the library's DecodeAttention (attention.py).
    decode_attention: bool = False


@dataclass(frozen=True)
class WeightSource:
    """Where the builder pulls weights from, one layer at a time (keeps peak memory low)."""

    embedding: Callable[[], Weight]
    lm_head: Callable[[], Weight]
    final_norm: Callable[[], np.ndarray]
    layer: Callable[[int], LayerWeights]


class DecoderGraphBuilder:
    def __init__(
        self, spec: DecoderSpec, options: GraphOptions, features: ArchFeatures | None = None
    ) -> None:
        self.spec = spec
        self.options = options
        self.features = features or plain_features(spec)
        self.g = OnnxGraph()
        # This graph's own path; _through() switches to another while building.
        self.path = LayerPath("", "", levels=0)
        self.single_token: str | None = None  # the step/prompt condition, when split
        ctx, f = options.context_length, self.features
        self.attn: GQAAttention | StandardAttention
        if options.static_window:
            self.attn = StaticWindowAttention(self.g, spec, ctx, options.static_window, f)
        elif options.attention == "standard":
            self.attn = StandardAttention(self.g, spec, ctx, f)
        else:
            self.attn = GQAAttention(self.g, spec, ctx, f)

    # -- building blocks -------------------------------------------------------------------
    def linear(
        self,
        x: str,
        w: Weight,
        name: str,
        accuracy_level: int | None = None,
        bias: np.ndarray | None = None,
        levels: int | tuple[int, int] | None = None,
    ) -> str:
        """x @ w^T (+ bias); `levels` int8 rows (0: none; a pair: in steps, in prompts), by
        default the current path's."""
        count = self.path.levels if levels is None else levels
        y = self._matmul(x, w, name, accuracy_level, count)
        if bias is None:
            return y
        return self.g.op1("Add", [y, self.g.const(f"{name}.bias", bias.astype(np.float32))])

    def _matmul(
        self,
        x: str,
        w: Weight,
        name: str,
        accuracy_level: int | None,
        levels: int | tuple[int, int],
    ) -> str:
        g = self.g
        level = self.options.accuracy_level if accuracy_level is None else accuracy_level
        if isinstance(w, GgufWeight):  # raw GGUF blocks: the native kernels (native_graph.py)
            return native_matmul(g, x, w, name)
        if isinstance(w, FloatWeight):
            return g.op1("MatMul", [x, g.const(f"{name}.weight_t", w.w.T.copy())])
        if level == 0 and levels and int8_levels_apply(w):
            xb = blocked(g, x, w)
            y = levels_product(g, self._level_rows(xb, levels), w, name)
            if w.mins is None:
                return y
            return g.op1("Add", [y, self._block_offsets(block_sums(g, xb), w, name)])
        if level == 0 and w.bits == 8 and self.path.dequantize_8bit:
            y = dequantized_matmul(g, x, w, name)
        else:
            cells, x_in = w, x
            split = two_nibbles(w) if level == 0 else None  # 8-bit: ~5x faster as 4-bit halves
            if split is not None:
                cells, x_in = split, g.op1("Concat", [x, x], axis=-1)
            y = g.op1(
                "MatMulNBits",
                nbits_inputs(g, x_in, name, cells),
                domain=MS_DOMAIN,
                K=cells.k,
                N=cells.n,
                bits=cells.bits,
                block_size=cells.block_size,
                accuracy_level=level,
            )
        if w.mins is None:
            return y
        blocks = np.array([0, 0, w.k // w.block_size, w.block_size], dtype=np.int64)
        xb = g.op1("Reshape", [x, g.const("block_shape", blocks)])
        sums = g.op1("ReduceSum", [xb, g.const("axis_last", np.array([-1], np.int64))], keepdims=0)
        return g.op1("Add", [y, self._block_offsets(sums, w, name)])

    def _block_offsets(self, sums: str, w: NBitsWeight, name: str) -> str:
        """sum over blocks of min[n, b] * sum(x in block b): the part MatMulNBits cannot hold."""
        g = self.g
        assert w.mins is not None  # only weights with block minimums come here
        return g.op1("MatMul", [sums, g.const(f"{name}.block_mins_t", w.mins.T.copy())])

    def embed(self, ids: str, w: Weight) -> str:
        if isinstance(w, GgufWeight):
            return native_gather(self.g, ids, w)
        return embed_tokens(self.g, ids, w)

    def rms(self, x: str, gamma: np.ndarray, name: str) -> str:
        return self.g.op1(
            "SimplifiedLayerNormalization",
            [x, self.g.const(f"{name}.weight", gamma)],
            axis=-1,
            epsilon=self.spec.rms_eps,
            stash_type=1,
        )

    def skip_rms(self, x: str, residual: str, gamma: np.ndarray, name: str) -> tuple[str, str]:
        """RMSNorm(x + residual) and the new residual stream (x + residual)."""
        g = self.g
        out = g.unique(f"{name}/output")
        new_residual = g.unique(f"{name}/residual")
        g.op(
            "SkipSimplifiedLayerNormalization",
            [x, residual, g.const(f"{name}.weight", gamma)],
            [out, "", "", new_residual],
            domain=MS_DOMAIN,
            epsilon=self.spec.rms_eps,
        )
        return out, new_residual

    def attention(self, x: str, lw: LayerWeights, i: int) -> str:
        name = f"layers.{i}.attn"
        fused = concat_rows([lw.q, lw.k, lw.v])
        if fused is not None and lw.q_norm is None:
            qkv = [self.linear(x, fused, f"{name}.qkv", bias=_fused_bias(lw))]
        else:
            parts = {"q": (lw.q, lw.q_bias), "k": (lw.k, lw.k_bias), "v": (lw.v, lw.v_bias)}
            qkv = [self.linear(x, w, f"{name}.{p}", bias=b) for p, (w, b) in parts.items()]
            if lw.q_norm is not None and lw.k_norm is not None:
                qkv[0] = self.head_rms(qkv[0], lw.q_norm, self.spec.n_heads, f"{name}.q_norm")
                qkv[1] = self.head_rms(qkv[1], lw.k_norm, self.spec.n_kv_heads, f"{name}.k_norm")
        return self.linear(self.attn(qkv, i), lw.o, f"{name}.o_proj", bias=lw.o_bias)

    def head_rms(self, x: str, gamma: np.ndarray, heads: int, name: str) -> str:
        """RMSNorm of each head of [B, S, heads*D] (Qwen 3 / Gemma 3 Q and K, before RoPE)."""
        g, d = self.g, self.spec.head_dim
        split = g.op1(
            "Reshape", [x, g.const(f"shape_heads_{heads}", np.array([0, 0, heads, d], np.int64))]
        )
        normed = self.rms(split, gamma, name)
        return g.op1(
            "Reshape", [normed, g.const("shape_merge_heads", np.array([0, 0, -1], np.int64))]
        )

    def mlp(self, x: str, lw: LayerWeights, i: int) -> str:
        g = self.g
        fused = concat_rows([lw.gate, lw.up])
        if fused is not None:
            bias = _concat_biases([(lw.gate, lw.gate_bias), (lw.up, lw.up_bias)])
            gu = self.linear(x, fused, f"layers.{i}.mlp.gate_up", bias=bias)
            size = g.const("split_sizes", np.array([lw.gate.n, lw.up.n], dtype=np.int64))
            gate, up = g.op("Split", [gu, size], 2, axis=-1)
        else:
            gate = self.linear(x, lw.gate, f"layers.{i}.mlp.gate", bias=lw.gate_bias)
            up = self.linear(x, lw.up, f"layers.{i}.mlp.up", bias=lw.up_bias)
        if self.features.activation == "gelu_tanh":
            act = g.op1("Gelu", [gate], approximate="tanh")
        else:
            act = g.op1("Mul", [gate, g.op1("Sigmoid", [gate])])
        return self.linear(
            g.op1("Mul", [act, up]), lw.down, f"layers.{i}.mlp.down", bias=lw.down_bias
        )

    def logits_rows(self, ids: str) -> str:
        """Which positions get logits: those named by the overridable input logits_positions;
        all when it is empty."""
        g = self.g
        wanted = g.add_input(LOGITS_POSITIONS, TensorProto.INT64, ["logits_length"])
        g.initializers.append(numpy_helper.from_array(np.zeros(0, np.int64), wanted))
        # Range(0, S * (K == 0)): every position when none is named, else nothing extra.
        length = g.op1("Squeeze", [g.op1("Shape", [ids], start=1, end=2)])
        none_named = g.op1("Equal", [g.op1("Size", [wanted]), g.const("zero", np.array(0))])
        limit = g.op1("Mul", [length, g.op1("Cast", [none_named], to=TensorProto.INT64)])
        every = g.op1("Range", [g.const("zero", np.array(0)), limit, g.const("one", np.array(1))])
        return g.op1("Concat", [wanted, every], axis=0)

    def head(self, hidden: str, w: Weight) -> str:
        """The output projection: on exact int8 levels when the weight takes them (three, or
        the step path's two in single-token steps when the layers are split), else as the
        options say."""
        if self.options.lm_head_int8:
            return self.linear(hidden, w, "lm_head", accuracy_level=4)
        if isinstance(w, NBitsWeight) and int8_levels_apply(w):
            # Reads its 8-bit codes (30 MB on the default model), not a float32 copy (113 MB).
            levels = (STEP_LEVELS, LEVELS) if self.single_token else LEVELS
            return self.linear(hidden, w, "lm_head", accuracy_level=0, levels=levels)
        if isinstance(w, GgufWeight):
            return self.linear(hidden, w, "lm_head")
        # Float heads, and 4-bit cells of 16 (Q2_K/Q3_K), which the levels do not take:
        # 8-bit MatMulNBits has no fast float path on CPU, a float MatMul is exact and faster.
        return self.linear(hidden, FloatWeight(w.dequantize()), "lm_head")

    def _level_rows(self, xb: str, levels: int | tuple[int, int]) -> str:
        """`levels` int8 rows of blocked x; for a (step, prompt) pair the count follows the
        run, so one node (one packed copy of the weight) serves both."""
        if isinstance(levels, int):
            return level_rows(self.g, xb, levels)
        assert self.single_token is not None  # pairs come only with the step/prompt split
        step, prompt = levels
        assert prompt == step + 1
        return level_rows_by_run(self.g, xb, step, self.single_token)

    def _layer(self, hidden: str, residual: str, lw: LayerWeights, i: int) -> tuple[str, str]:
        """One decoder layer; returns its output and the residual stream."""
        if i == 0:  # hidden is the embedding, which is also the residual
            normed = self.rms(hidden, lw.attn_norm, "layers.0.input_layernorm")
        else:
            normed, residual = self.skip_rms(
                hidden, residual, lw.attn_norm, f"layers.{i}.input_layernorm"
            )
        attn = self.attention(normed, lw, i)
        if lw.post_attn_norm is not None:
            attn = self.rms(attn, lw.post_attn_norm, f"layers.{i}.post_attention_norm")
        normed, residual = self.skip_rms(
            attn, residual, lw.ffn_norm, f"layers.{i}.post_attention_layernorm"
        )
        hidden = self.mlp(normed, lw, i)
        if lw.post_ffn_norm is not None:
            hidden = self.rms(hidden, lw.post_ffn_norm, f"layers.{i}.post_feedforward_norm")
        return hidden, residual

    def _layer_paths(self, x: str, first: LayerWeights) -> list[LayerPath]:
        """How the layers are built: once, or twice under the step/prompt If (step_split.py)
        when single-token steps would take the int8 levels the first layer's weights allow."""
        o = self.options
        if isinstance(first.q, GgufWeight) and isinstance(self.attn, GQAAttention):
            # Native kernels: one path for steps and prompts, attention by the library's
            # DecodeAttention, which computes a prompt's rows in a step's float order: with the
            # fast kernels' row-invariant products, a row's logits are the same bits fresh, from
            # the cache, chunked or batched (issue 49).
            return [LayerPath(x, x, levels=0, decode_attention=True)]
        if o.int8_levels == "all":
            return [LayerPath(x, x, levels=LEVELS)]
        takes_levels = any(
            isinstance(w, NBitsWeight) and int8_levels_apply(w)
            for w in (first.q, first.k, first.v, first.o, first.gate, first.up, first.down)
        )
        if (
            o.int8_levels != "decode"
            or o.accuracy_level != 0
            or not isinstance(self.attn, GQAAttention)
            or not takes_levels
        ):
            return [LayerPath(x, x, levels=0)]
        return [
            LayerPath(x, x, levels=STEP_LEVELS, nodes=[], prefix="step/"),
            LayerPath(x, x, levels=0, nodes=[], prefix="prompt/", dequantize_8bit=True),
        ]

    @contextmanager
    def _through(self, path: LayerPath) -> Iterator[None]:
        """Build into `path` (its node list, a branch body, or this graph; its levels; its
        presents' prefix), then back to the path before."""
        before, self.path = self.path, path
        self._point_attention(path)
        try:
            if path.nodes is None:
                yield
            else:
                with self.g.collecting(path.nodes):
                    yield
        finally:
            self.path = before
            self._point_attention(before)

    def _point_attention(self, path: LayerPath) -> None:
        """The attention block builds for `path`: its presents' prefix, and DecodeAttention in
        a native graph's step path."""
        if isinstance(self.attn, GQAAttention):
            self.attn.present_prefix = path.prefix
            self.attn.decode_op = path.decode_attention

    def _join(self, paths: list[LayerPath], ids: str) -> str:
        """The If that runs the step path for one new token and the prompt path otherwise."""
        g, step, prompt = self.g, paths[0], paths[1]
        self.single_token = single_token(g, ids)
        presents = [f"present.{i}.{k}" for i in range(self.spec.n_layers) for k in ("key", "value")]

        def body(path: LayerPath, name: str) -> onnx.GraphProto:
            assert path.nodes is not None
            return branch(path.nodes, name, [path.hidden] + [path.prefix + p for p in presents])

        final = g.unique("layers/final_hidden")
        g.op(
            "If",
            [self.single_token],
            [final, *presents],
            name=STEP_OR_PROMPT_NODE,
            then_branch=body(step, "step"),
            else_branch=body(prompt, "prompt"),
        )
        return final

    # -- the whole model -------------------------------------------------------------------
    def build(self, source: WeightSource, progress: Progress | None = None) -> onnx.ModelProto:
        g, spec = self.g, self.spec
        report = progress or (lambda _f, _m: None)
        io = self.attn.io()
        ids = g.add_input("input_ids", TensorProto.INT64, io.ids_shape)
        mask = g.add_input("attention_mask", TensorProto.INT64, io.mask_shape)
        positions = None
        if io.position_ids:
            positions = g.add_input("position_ids", TensorProto.INT64, io.ids_shape)
        for i in range(spec.n_layers):
            for kind in ("key", "value"):
                g.add_input(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, io.past_shape)
        g.add_output("logits", TensorProto.FLOAT, io.logits_shape)
        for i in range(spec.n_layers):
            for kind in ("key", "value"):
                g.add_output(f"present.{i}.{kind}", TensorProto.FLOAT, io.present_shape)
        if isinstance(self.attn, StandardAttention):
            self.attn.bind_ids(ids)

        report(0.0, "embedding")
        x = self.embed(ids, source.embedding())
        if self.features.embed_scale != 1.0:
            scale = np.array(self.features.embed_scale, np.float32)
            x = g.op1("Mul", [x, g.const("embed_scale", scale)])
        paths: list[LayerPath] = []
        for i in range(spec.n_layers):
            lw = source.layer(i)
            if i == 0:
                paths = self._layer_paths(x, lw)
                if isinstance(self.attn, GQAAttention):
                    self.attn.decode_only = all(p.decode_attention for p in paths)
                self.attn.prelude(mask, positions)  # in this graph, before any path's nodes
            for path in paths:
                with self._through(path):
                    path.hidden, path.residual = self._layer(path.hidden, path.residual, lw, i)
            report((i + 1) / (spec.n_layers + 1), f"layer {i + 1}/{spec.n_layers}")
        final_norm = source.final_norm()
        for path in paths:
            with self._through(path):
                path.hidden, _ = self.skip_rms(path.hidden, path.residual, final_norm, "final_norm")
        final = paths[0].hidden if len(paths) == 1 else self._join(paths, ids)
        if not self.options.static_window:  # a window's logits are few already
            final = g.op1("Gather", [final, self.logits_rows(ids)], axis=1)
        logits = self.head(final, source.lm_head())
        if self.features.final_softcap:
            cap = np.float32(self.features.final_softcap)
            scaled = g.op1("Mul", [logits, g.const("inv_final_cap", np.array(1 / cap, np.float32))])
            logits = g.op1("Mul", [g.op1("Tanh", [scaled]), g.const("final_cap", np.array(cap))])
        g.op("Identity", [logits], ["logits"])
        report(1.0, "graph built")
        return g.model(
            spec.name, {"chatapp.attention": self.attn.kind, "chatapp.kv_layout": self.attn.layout}
        )


def _concat_biases(parts: list[tuple[Weight, np.ndarray | None]]) -> np.ndarray | None:
    """One bias for fused rows (zeros where a part has none); None when no part has one."""
    if all(b is None for _, b in parts):
        return None
    return np.concatenate([np.zeros(w.n, np.float32) if b is None else b for w, b in parts])


def _fused_bias(lw: LayerWeights) -> np.ndarray | None:
    return _concat_biases([(lw.q, lw.q_bias), (lw.k, lw.k_bias), (lw.v, lw.v_bias)])
