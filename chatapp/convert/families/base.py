"""What every family shares: its tensor list (an unknown tensor is an error naming it), the
weight reader that remembers what it read, and the hooks a family fills in.

Tensor names are llama.cpp's (gguf-py's `MODEL_TENSORS`); every family may store Q/K/V fused
(`attn_qkv`) or split, as llama.cpp's loader accepts both.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from chatapp.convert.decoder_weights import LayerWeights
from chatapp.convert.errors import ConversionError
from chatapp.convert.features import ArchFeatures
from chatapp.convert.gguf_blocks import native_weight
from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.weights import Weight, to_weight, unpermute_rope_rows

LAYER_NAME = re.compile(r"blk\.(\d+)\.(.+)$")
SPLIT_QKV = ("attn_q.weight", "attn_k.weight", "attn_v.weight")
QKV_BIASES = ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_qkv.bias")
FFN_BIASES = ("ffn_gate.bias", "ffn_up.bias", "ffn_down.bias")
# Tensors that point at a kind of model this converter does not build, and what to call it.
UNSUPPORTED_PARTS = {
    re.compile(r"ffn_gate_inp|_exps\."): "mixture-of-experts layers",
    re.compile(r"^(v|mm|vision)\."): "vision encoders",
    re.compile(r"attn_rot_embd"): "stored RoPE tables (old conversions)",
}


class Family:
    """One llama.cpp architecture name and how its file maps onto the decoder graph."""

    arch: ClassVar[str]
    hf_architecture: ClassVar[str]
    hf_model_type: ClassVar[str]
    genai_type: ClassVar[str]
    # llama.cpp permutes Q/K rows of `llama` files for its interleaved RoPE.
    rope_rows_interleaved: ClassVar[bool] = False
    # Phi-3 stores gate and up as one `ffn_up` of 2 x ffn rows (gate first), no `ffn_gate`.
    fused_gate_up: ClassVar[bool] = False
    layer_required: ClassVar[tuple[str, ...]] = (
        "attn_norm.weight",
        "attn_output.weight",
        "ffn_norm.weight",
        "ffn_gate.weight",
        "ffn_up.weight",
        "ffn_down.weight",
    )
    layer_optional: ClassVar[tuple[str, ...]] = ()
    global_optional: ClassVar[tuple[str, ...]] = ("output.weight",)

    def check(self, model: GGUFModel) -> None:
        """Refuse, by name, a tensor this family does not use, and name a missing one."""
        n_layers = model.spec.n_layers
        known_layer = {*self.layer_required, *self.layer_optional, *SPLIT_QKV, "attn_qkv.weight"}
        known_global = {"token_embd.weight", "output_norm.weight", *self.global_optional}
        unknown = []
        for name in model.tensors:
            match = LAYER_NAME.match(name)
            if match:
                if int(match.group(1)) >= n_layers or match.group(2) not in known_layer:
                    unknown.append(name)
            elif name not in known_global:
                unknown.append(name)
        if unknown:
            raise ConversionError(_unknown_message(model, self.arch, unknown))
        missing = [n for n in ("token_embd.weight", "output_norm.weight") if not model.has(n)]
        for i in range(n_layers):
            needed = list(self.layer_required)
            if not model.has(f"blk.{i}.attn_qkv.weight"):
                needed += SPLIT_QKV
            missing += [f"blk.{i}.{s}" for s in needed if not model.has(f"blk.{i}.{s}")]
        if missing:
            raise ConversionError(
                f"{model.path.name} has no tensor '{missing[0]}', which a '{self.arch}' model "
                f"needs ({len(missing)} missing in all)."
            )
        value_length = model.metadata.get(f"{self.arch}.attention.value_length")
        if value_length is not None and int(value_length) != model.spec.head_dim:
            raise ConversionError(
                f"{model.path.name} has values of {value_length} and keys of "
                f"{model.spec.head_dim} dimensions per head; both must be equal."
            )

    def features(self, weights: ModelWeights) -> ArchFeatures:
        raise NotImplementedError

    def hf_extra(self, model: GGUFModel, features: ArchFeatures) -> dict[str, Any]:
        """Keys of this family's Hugging Face config.json beyond the Llama ones."""
        return {}

    def unpermute(self, w: Weight, bias: np.ndarray | None, heads: int) -> tuple[Weight, Any]:
        if not self.rope_rows_interleaved:
            return w, bias
        index = unpermute_index(w.n, heads)
        return unpermute_rope_rows(w, heads), None if bias is None else bias[index]


def rope_dims(model: GGUFModel, partial: bool = False) -> int:
    """Rotated dimensions per head; only families with partial rotary may rotate fewer."""
    spec = model.spec
    dims = int(model.metadata.get(f"{spec.architecture}.rope.dimension_count", spec.head_dim))
    if dims != spec.head_dim and not (partial and 0 < dims < spec.head_dim and dims % 2 == 0):
        raise ConversionError(
            f"{model.path.name} rotates {dims} of {spec.head_dim} head dimensions, which a "
            f"'{spec.architecture}' model does not do."
        )
    return dims


def rope_attn_factor(model: GGUFModel) -> float:
    """llama.cpp multiplies cos and sin by this (LongRoPE's attention scaling)."""
    key = f"{model.spec.architecture}.rope.scaling.attn_factor"
    return float(model.metadata.get(key, 1.0) or 1.0)


def unpermute_index(rows: int, heads: int) -> np.ndarray:
    """The row order unpermute_rope_rows applies (for the bias vectors beside the weights)."""
    half = rows // heads // 2
    return np.arange(rows).reshape(heads, half, 2).swapaxes(1, 2).reshape(-1)


def _unknown_message(model: GGUFModel, arch: str, names: list[str]) -> str:
    reasons = {why for part, why in UNSUPPORTED_PARTS.items() for n in names if part.search(n)}
    shown = ", ".join(f"'{n}'" for n in names[:3])
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    why = f" ({', '.join(sorted(reasons))} are not supported)" if reasons else ""
    return (
        f"{model.path.name} holds tensors this converter does not use for a '{arch}' model: "
        f"{shown}{more}{why}; converting without them would change the model's answers."
    )


class ModelWeights:
    """Reads a family's weights layer by layer and remembers every tensor it read."""

    def __init__(self, model: GGUFModel, family: Family, native: bool = False) -> None:
        self.model, self.family = model, family
        self.read: set[str] = set()
        self.native = native  # projections in their raw GGUF blocks (native kernels)

    def tensor(self, name: str) -> Any:
        self.read.add(name)
        return self.model.tensor(name)

    def matrix(self, name: str) -> Weight:
        t = self.tensor(name)
        if (
            self.native
            and len(t.shape) == 2
            and (kept := native_weight(t.qtype, t.data, *t.shape)) is not None
        ):
            return kept
        return to_weight(t)

    def vector(self, name: str, size: int | None = None) -> np.ndarray:
        values = np.asarray(self.tensor(name).data, dtype=np.float32).reshape(-1)
        if size is not None and values.size != size:
            raise ConversionError(
                f"{self.model.path.name}: tensor '{name}' has {values.size} values, "
                f"{size} were expected."
            )
        return values

    def optional(self, name: str, size: int) -> np.ndarray | None:
        return self.vector(name, size) if self.model.has(name) else None

    def unused(self) -> list[str]:
        return sorted(set(self.model.tensors) - self.read)

    # -- the parts the graph builder pulls ----------------------------------------------------
    def embedding(self) -> Weight:
        return self.matrix("token_embd.weight")

    def lm_head(self) -> Weight:
        name = "token_embd.weight" if self.model.spec.tied_embeddings else "output.weight"
        return self.matrix(name)

    def final_norm(self) -> np.ndarray:
        return self.vector("output_norm.weight", self.model.spec.hidden_size)

    def layer(self, i: int) -> LayerWeights:
        spec, fam = self.model.spec, self.family
        p = f"blk.{i}."
        q_rows, kv_rows = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
        q, k, v, qb, kb, vb = self._qkv(p, q_rows, kv_rows)
        q, qb = fam.unpermute(q, qb, spec.n_heads)
        k, kb = fam.unpermute(k, kb, spec.n_kv_heads)
        gate, up, gate_b, up_b = self._gate_up(p)
        hidden, head = spec.hidden_size, spec.head_dim
        down = self._matrix(p + "ffn_down.weight", hidden, spec.intermediate_size)
        return LayerWeights(
            attn_norm=self.vector(p + "attn_norm.weight", hidden),
            q=q,
            k=k,
            v=v,
            o=self._matrix(p + "attn_output.weight", hidden, q_rows),
            ffn_norm=self.vector(p + "ffn_norm.weight", hidden),
            gate=gate,
            up=up,
            down=down,
            q_bias=qb,
            k_bias=kb,
            v_bias=vb,
            o_bias=self.optional(p + "attn_output.bias", hidden),
            gate_bias=gate_b,
            up_bias=up_b,
            down_bias=self.optional(p + "ffn_down.bias", hidden),
            q_norm=self.optional(p + "attn_q_norm.weight", head),
            k_norm=self.optional(p + "attn_k_norm.weight", head),
            post_attn_norm=self.optional(p + "post_attention_norm.weight", hidden),
            post_ffn_norm=self.optional(p + "post_ffw_norm.weight", hidden),
        )

    def _qkv(self, p: str, q_rows: int, kv_rows: int) -> tuple[Any, ...]:
        total = q_rows + 2 * kv_rows
        if self.model.has(p + "attn_qkv.weight"):
            fused = self._matrix(p + "attn_qkv.weight", total)
            bias = self.optional(p + "attn_qkv.bias", total)
            cuts = [(0, q_rows), (q_rows, q_rows + kv_rows), (q_rows + kv_rows, total)]
            parts = [fused.rows(np.arange(a, b)) for a, b in cuts]
            biases = [None if bias is None else bias[a:b] for a, b in cuts]
            return (*parts, *biases)
        sizes = {"attn_q": q_rows, "attn_k": kv_rows, "attn_v": kv_rows}
        weights = [self._matrix(f"{p}{part}.weight", rows) for part, rows in sizes.items()]
        biases = [self.optional(f"{p}{part}.bias", rows) for part, rows in sizes.items()]
        return (*weights, *biases)

    def _gate_up(self, p: str) -> tuple[Weight, Weight, Any, Any]:
        ffn = self.model.spec.intermediate_size
        if self.family.fused_gate_up:
            fused = self._matrix(p + "ffn_up.weight", 2 * ffn)
            return fused.rows(np.arange(ffn)), fused.rows(np.arange(ffn, 2 * ffn)), None, None
        gate = self._matrix(p + "ffn_gate.weight", ffn)
        up = self._matrix(p + "ffn_up.weight", ffn)
        return (
            gate,
            up,
            self.optional(p + "ffn_gate.bias", ffn),
            self.optional(p + "ffn_up.bias", ffn),
        )

    def _matrix(self, name: str, rows: int, cols: int | None = None) -> Weight:
        """A matrix whose shape the hyper-parameters fix (a mismatch would fail in the graph)."""
        w = self.matrix(name)
        cols = self.model.spec.hidden_size if cols is None else cols
        if (w.n, w.k) != (rows, cols):
            raise ConversionError(
                f"{self.model.path.name}: tensor '{name}' is {w.n} x {w.k}; the model's "
                f"hyper-parameters need {rows} x {cols}."
            )
        return w
