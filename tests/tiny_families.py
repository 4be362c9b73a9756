"""Tiny GGUF files of every supported family, written as llama.cpp's converter writes them.

Tensor names and metadata keys are gguf-py's (the same module llama.cpp's converter uses), so
llama.cpp itself loads these files. Weights are random; the tokenizer is the tiny byte-level
BPE of tests/tiny_model.py (the families' own tokenizers are tested elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from tests.tiny_model import (
    CHATML_TEMPLATE,
    K_QUANT_SCALE_FIELDS,
    _quantize,
    random_kquant,
    tiny_vocab,
)

QType = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class TinyFamily:
    arch: str
    qtype: str = "Q8_0"
    embed_qtype: str = "Q8_0"
    n_layers: int = 2
    hidden: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int | None = None  # None: hidden / heads (no key_length written)
    ffn: int = 128
    context: int = 512
    rope_base: float = 10000.0
    rope_dims: int | None = None  # partial rotary (Phi-4-mini)
    rope_linear: float = 0.0  # linear RoPE scaling factor (Gemma 3 4B+); 0: none
    tied: bool = True
    fused_qkv: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    ffn_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    rope_freqs: bool = False  # Llama 3.1+ per-frequency factors
    window: int = 0  # sliding window (Gemma 2/3; Phi-3 writes one that llama.cpp ignores)
    swa_pattern: Any = None  # written as sliding_window_pattern when set
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    longrope: bool = False  # Phi-3 128k: rope_factors_long / _short tensors
    original_context: int = 0
    attn_factor: float = 0.0
    extra_tensors: tuple[str, ...] = ()
    # Other types for some tensors, by kind ("attn_v", "ffn_down", "output", ...), as presets mix
    tensor_types: dict[str, str] = field(default_factory=dict)
    tokenizer_pre: str = "default"
    seed: int = 0
    name: str = field(default="")

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.n_heads

    @property
    def rotated(self) -> int:
        return self.rope_dims or self.dim


# One example of each family, with its features switched on and small enough to take seconds.
FAMILIES: dict[str, TinyFamily] = {
    "llama3": TinyFamily("llama", rope_freqs=True, rope_base=500000.0),
    "llama-biases": TinyFamily("llama", qkv_bias=True, o_bias=True, ffn_bias=True),
    "llama-head-dim": TinyFamily("llama", head_dim=32, n_heads=4, n_kv_heads=2),
    "qwen2": TinyFamily("qwen2", qkv_bias=True, rope_base=1000000.0),
    "qwen3": TinyFamily("qwen3", qk_norm=True, head_dim=32, rope_base=1000000.0),
    "gemma2": TinyFamily(
        "gemma2", post_norms=True, window=5, attn_softcap=4.0, final_softcap=6.0, n_layers=3
    ),
    "gemma3": TinyFamily(
        "gemma3",
        qk_norm=True,
        post_norms=True,
        window=5,
        n_layers=7,
        n_kv_heads=1,
        head_dim=32,
        rope_base=1000000.0,
        rope_linear=8.0,
    ),
    "phi3": TinyFamily("phi3", fused_qkv=True, window=2047),
    "phi4-mini": TinyFamily(
        "phi3",
        fused_qkv=True,
        n_heads=2,
        n_kv_heads=1,
        rope_dims=16,
        longrope=True,
        original_context=16,
        attn_factor=1.19,
        context=128,
    ),
}


def write_family_gguf(path: Path, family: TinyFamily | str, **changes: Any) -> Path:
    """Write `family` (a TinyFamily or a FAMILIES key), with fields replaced by `changes`."""
    spec = FAMILIES[family] if isinstance(family, str) else family
    spec = replace(spec, **changes)
    rng = np.random.default_rng(spec.seed)
    tokens, types, merges = tiny_vocab()
    w = gguf.GGUFWriter(str(path), spec.arch)
    _metadata(w, spec, tokens, types, merges)
    tensors = _Tensors(w, spec, rng)
    tensors.write_all(len(tokens))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _metadata(
    w: gguf.GGUFWriter, s: TinyFamily, tokens: list[str], types: list[int], merges: list[str]
) -> None:
    # Not the architecture: llama.cpp changes token attributes of models named like "phi3".
    w.add_name(s.name or "tiny-test-model")
    w.add_block_count(s.n_layers)
    w.add_context_length(s.context)
    w.add_embedding_length(s.hidden)
    w.add_feed_forward_length(s.ffn)
    w.add_head_count(s.n_heads)
    w.add_head_count_kv(s.n_kv_heads)
    if s.head_dim:
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.rotated)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(1e-6)
    if s.rope_linear:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(s.rope_linear)
    if s.window:
        w.add_sliding_window(s.window)
    if s.swa_pattern is not None:
        w.add_sliding_window_pattern(s.swa_pattern)
    if s.attn_softcap:
        w.add_attn_logit_softcapping(s.attn_softcap)
    if s.final_softcap:
        w.add_final_logit_softcapping(s.final_softcap)
    if s.original_context:
        w.add_rope_scaling_orig_ctx_len(s.original_context)
    if s.attn_factor:
        w.add_rope_scaling_attn_factors(s.attn_factor)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(s.tokenizer_pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)


class _Tensors:
    def __init__(self, w: gguf.GGUFWriter, s: TinyFamily, rng: np.random.Generator) -> None:
        self.w, self.s, self.rng = w, s, rng

    def matrix(self, name: str, rows: int, cols: int, scale: float, qtype: str) -> None:
        qtype = self.s.tensor_types.get(name.split(".")[-2], qtype)
        kind = QType[qtype]
        if qtype in K_QUANT_SCALE_FIELDS:
            data = random_kquant(rows, cols, qtype, self.rng)
        else:
            data = _quantize(self.rng.normal(0.0, scale, size=(rows, cols)), kind)
        raw = None if kind in (QType.F32, QType.F16) else kind
        if kind == QType.BF16:  # gguf-py's bf16 rounding, as bytes (raw types are uint8 rows)
            data, raw = np.asarray(data).view(np.uint8).reshape(rows, -1), kind
        self.w.add_tensor(name, data, raw_dtype=raw)

    def vector(self, name: str, size: int, mean: float = 1.0, spread: float = 0.1) -> None:
        values = mean + spread * self.rng.normal(size=size)
        self.w.add_tensor(name, values.astype(np.float32))

    def write_all(self, vocab: int) -> None:
        s = self.s
        self.matrix("token_embd.weight", vocab, s.hidden, 1.0, s.embed_qtype)
        if s.rope_freqs:
            # Llama 3's shape: 1 for high frequencies, up to 8 for low ones.
            factors = np.linspace(1.0, 8.0, s.rotated // 2) ** np.linspace(0, 1, s.rotated // 2)
            self.w.add_tensor("rope_freqs.weight", factors.astype(np.float32))
        if s.longrope:
            self.vector("rope_factors_short.weight", s.rotated // 2, 1.0, 0.05)
            self.w.add_tensor(
                "rope_factors_long.weight",
                np.linspace(1.0, 6.0, s.rotated // 2).astype(np.float32),
            )
        for i in range(s.n_layers):
            self.layer(i)
        self.vector("output_norm.weight", s.hidden)
        if not s.tied:
            self.matrix("output.weight", vocab, s.hidden, 0.5, s.embed_qtype)
        for name in s.extra_tensors:
            self.vector(name, s.hidden)

    def layer(self, i: int) -> None:
        s, p = self.s, f"blk.{i}."
        q_rows, kv_rows = s.n_heads * s.dim, s.n_kv_heads * s.dim
        self.vector(p + "attn_norm.weight", s.hidden)
        if s.fused_qkv:
            self.matrix(p + "attn_qkv.weight", q_rows + 2 * kv_rows, s.hidden, 0.15, s.qtype)
            if s.qkv_bias:
                self.vector(p + "attn_qkv.bias", q_rows + 2 * kv_rows, 0.0, 0.3)
        else:
            for part, rows in (("attn_q", q_rows), ("attn_k", kv_rows), ("attn_v", kv_rows)):
                self.matrix(f"{p}{part}.weight", rows, s.hidden, 0.15, s.qtype)
                if s.qkv_bias:
                    self.vector(f"{p}{part}.bias", rows, 0.0, 0.3)
        if s.qk_norm:
            self.vector(p + "attn_q_norm.weight", s.dim)
            self.vector(p + "attn_k_norm.weight", s.dim)
        self.matrix(p + "attn_output.weight", s.hidden, q_rows, 0.1, s.qtype)
        if s.o_bias:
            self.vector(p + "attn_output.bias", s.hidden, 0.0, 0.3)
        if s.post_norms:
            self.vector(p + "post_attention_norm.weight", s.hidden)
        self.vector(p + "ffn_norm.weight", s.hidden)
        if s.arch == "phi3":  # gate and up in one tensor, gate first
            self.matrix(p + "ffn_up.weight", 2 * s.ffn, s.hidden, 0.15, s.qtype)
        else:
            self.matrix(p + "ffn_gate.weight", s.ffn, s.hidden, 0.15, s.qtype)
            self.matrix(p + "ffn_up.weight", s.ffn, s.hidden, 0.15, s.qtype)
        self.matrix(p + "ffn_down.weight", s.hidden, s.ffn, 0.1, s.qtype)
        if s.ffn_bias:
            self.vector(p + "ffn_gate.bias", s.ffn, 0.0, 0.3)
            self.vector(p + "ffn_up.bias", s.ffn, 0.0, 0.3)
            self.vector(p + "ffn_down.bias", s.hidden, 0.0, 0.3)
        if s.post_norms:
            self.vector(p + "post_ffw_norm.weight", s.hidden)
