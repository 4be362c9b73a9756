"""Checks of a GGUF file's hyper-parameters and tensor shapes, before anything is converted.

Generic on purpose: driven by the `{architecture}.*` metadata keys llama.cpp defines and by the
standard tensor names, so a new model family gets the same checks without code of its own. Each
refusal names the key or the tensor and says what was expected, in one line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from chatapp.convert.errors import ConversionError

# `{arch}.<suffix>` keys that count something: positive whole numbers (or per-layer lists).
POSITIVE_INT_KEYS = (
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "rope.dimension_count",
    "vocab_size",
    "expert_count",
    "expert_used_count",
)
# `{arch}.<suffix>` keys that must be finite and above zero.
POSITIVE_FLOAT_KEYS = (
    "rope.freq_base",
    "rope.scaling.factor",
    "attention.layer_norm_rms_epsilon",
    "attention.layer_norm_epsilon",
)
TOKEN_ID_KEYS = (
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.mask_token_id",
)
# Ids that end an answer: a value outside the vocabulary would never stop one.
END_TOKEN_KEYS = TOKEN_ID_KEYS[1:4]
MAX_LAYERS = 4096
MAX_NAME = 1000
MAX_WIDTH = 1 << 20  # hidden size, FFN size, heads x head size
MAX_CONTEXT = 1 << 24
NORM_TYPES = ("F32", "F16")  # what the converter reads 1-D norm weights from
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")


class SpecLike(Protocol):
    """The hyper-parameters every decoder spec has (DecoderSpec and the families beside it).
    Read-only properties, so that frozen dataclasses match."""

    @property
    def n_layers(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def n_heads(self) -> int: ...
    @property
    def n_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def context_length(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def rope_theta(self) -> float: ...
    @property
    def rms_eps(self) -> float: ...


class TensorLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def qtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_metadata(meta: Mapping[str, Any], path: Path) -> None:
    """Types and ranges of the metadata the converter reads, before any of it is used."""
    name = path.name
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch.strip():
        raise ConversionError(
            f"{name} does not say which architecture it is (general.architecture)."
        )
    title = meta.get("general.name")
    if title is not None and (not isinstance(title, str) or len(title) > MAX_NAME):
        raise ConversionError(
            f"{name}: metadata 'general.name' is not a name of at most {MAX_NAME} characters."
        )
    for suffix in POSITIVE_INT_KEYS:
        key = f"{arch}.{suffix}"
        if key in meta:
            _positive_ints(meta[key], key, name)
    for suffix in POSITIVE_FLOAT_KEYS:
        key = f"{arch}.{suffix}"
        if key in meta:
            value = meta[key]
            if not _is_number(value) or not math.isfinite(value) or value <= 0:
                raise ConversionError(
                    f"{name}: metadata '{key}' is {_show(value)}; a number above zero was expected."
                )
    for key, value in meta.items():
        if key.startswith(f"{arch}.") and isinstance(value, float) and not math.isfinite(value):
            raise ConversionError(f"{name}: metadata '{key}' is {value}, not a finite number.")
    _check_vocabulary(meta, arch, name)


def _positive_ints(value: Any, key: str, name: str) -> None:
    values = value if isinstance(value, list) else [value]
    if not values or not all(_is_int(v) and v > 0 for v in values):
        raise ConversionError(
            f"{name}: metadata '{key}' is {_show(value)}; a whole number above zero was expected."
        )


def _check_vocabulary(meta: Mapping[str, Any], arch: str, name: str) -> None:
    tokens = meta.get("tokenizer.ggml.tokens")
    if tokens is not None and not (
        isinstance(tokens, list) and all(isinstance(t, str) for t in tokens)
    ):
        raise ConversionError(f"{name}: metadata 'tokenizer.ggml.tokens' is not a list of text.")
    n_tokens = len(tokens) if tokens is not None else None
    for key, kind in (
        ("tokenizer.ggml.scores", _is_finite),
        ("tokenizer.ggml.token_type", _is_int),
    ):
        value = meta.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(kind(v) for v in value):
            raise ConversionError(f"{name}: metadata '{key}' is not a list of finite numbers.")
        if n_tokens is not None and len(value) != n_tokens:
            raise ConversionError(
                f"{name}: metadata '{key}' has {len(value)} entries for {n_tokens} tokens."
            )
    merges = meta.get("tokenizer.ggml.merges")
    if merges is not None and not (
        isinstance(merges, list) and all(isinstance(m, str) for m in merges)
    ):
        raise ConversionError(f"{name}: metadata 'tokenizer.ggml.merges' is not a list of text.")
    for key in TOKEN_ID_KEYS:
        value = meta.get(key)
        if value is None:
            continue
        if not _is_int(value):
            raise ConversionError(
                f"{name}: metadata '{key}' is {_show(value)}; a token id was expected."
            )
        if key in END_TOKEN_KEYS and n_tokens is not None and value >= n_tokens:
            raise ConversionError(
                f"{name}: metadata '{key}' is {value}, but the vocabulary has {n_tokens} tokens."
            )
    declared = meta.get(f"{arch}.vocab_size")
    if declared is not None and n_tokens is not None and declared != n_tokens:
        raise ConversionError(
            f"{name}: metadata '{arch}.vocab_size' is {declared}, but "
            f"'tokenizer.ggml.tokens' lists {n_tokens} tokens."
        )
    template = meta.get("tokenizer.chat_template")
    if template is not None and not isinstance(template, str):
        raise ConversionError(f"{name}: metadata 'tokenizer.chat_template' is not text.")


def check_spec(spec: SpecLike, tensors: Mapping[str, TensorLike], path: Path) -> None:
    """The hyper-parameters together, then every standard tensor's shape against them."""
    name = path.name
    _check_ranges(spec, name)
    expected = expected_shapes(spec)
    for tensor in tensors.values():
        want = expected.get(_generic_name(tensor.name))
        fused_up = tensor.name.replace("ffn_up", "ffn_gate") not in tensors
        if want is not None and tensor.name.endswith(".ffn_up.weight") and fused_up:
            want = (2 * want[0], want[1])  # Phi-3: gate and up in one `ffn_up`, no `ffn_gate`
        if want is not None and tuple(tensor.shape) != want:
            raise ConversionError(
                f"{name}: tensor '{tensor.name}' has the shape {list(tensor.shape)}; the "
                f"hyper-parameters give {list(want)}."
            )
        if tensor.name.endswith("norm.weight") and tensor.qtype not in NORM_TYPES:
            raise ConversionError(
                f"{name}: tensor '{tensor.name}' is stored as {tensor.qtype}; norm weights "
                f"must be {' or '.join(NORM_TYPES)}."
            )
        _check_bias(tensor, tensors, name)


def _check_ranges(spec: SpecLike, name: str) -> None:
    counts = {
        "block_count": (spec.n_layers, MAX_LAYERS),
        "embedding_length": (spec.hidden_size, MAX_WIDTH),
        "feed_forward_length": (spec.intermediate_size, MAX_WIDTH),
        "attention.head_count": (spec.n_heads, MAX_WIDTH),
        "attention.head_count_kv": (spec.n_kv_heads, MAX_WIDTH),
        "head size": (spec.head_dim, MAX_WIDTH),
        "context_length": (spec.context_length, MAX_CONTEXT),
        "vocabulary size": (spec.vocab_size, 1 << 24),
    }
    for what, (value, cap) in counts.items():
        if not _is_int(value) or not 0 < value <= cap:
            raise ConversionError(f"{name}: {what} is {value}; 1 to {cap} was expected.")
    if spec.n_heads % spec.n_kv_heads:
        raise ConversionError(
            f"{name}: {spec.n_heads} attention heads do not split into {spec.n_kv_heads} KV groups."
        )
    if spec.n_heads * spec.head_dim > MAX_WIDTH:
        raise ConversionError(f"{name}: {spec.n_heads} heads of {spec.head_dim} are too wide.")
    if spec.head_dim % 2:
        raise ConversionError(
            f"{name}: the head size {spec.head_dim} is odd; rotary embeddings need it even."
        )
    for what, number in (("rope.freq_base", spec.rope_theta), ("rms epsilon", spec.rms_eps)):
        if not math.isfinite(number) or number <= 0:
            raise ConversionError(f"{name}: {what} is {number}; a number above zero was expected.")


def expected_shapes(spec: SpecLike) -> dict[str, tuple[int, ...]]:
    """numpy-order shapes of the standard tensor names (`blk.N.` written as `blk.*.`)."""
    hidden, ffn = spec.hidden_size, spec.intermediate_size
    q_rows = spec.n_heads * spec.head_dim
    kv_rows = spec.n_kv_heads * spec.head_dim
    return {
        "token_embd.weight": (spec.vocab_size, hidden),
        "output.weight": (spec.vocab_size, hidden),
        "output_norm.weight": (hidden,),
        "blk.*.attn_norm.weight": (hidden,),
        "blk.*.ffn_norm.weight": (hidden,),
        "blk.*.attn_q.weight": (q_rows, hidden),
        "blk.*.attn_k.weight": (kv_rows, hidden),
        "blk.*.attn_v.weight": (kv_rows, hidden),
        "blk.*.attn_qkv.weight": (q_rows + 2 * kv_rows, hidden),
        "blk.*.attn_output.weight": (hidden, q_rows),
        "blk.*.ffn_gate.weight": (ffn, hidden),
        "blk.*.ffn_up.weight": (ffn, hidden),
        "blk.*.ffn_down.weight": (hidden, ffn),
    }


def _generic_name(tensor_name: str) -> str:
    match = _BLOCK.match(tensor_name)
    return f"blk.*.{match.group(2)}" if match else tensor_name


def _check_bias(tensor: TensorLike, tensors: Mapping[str, TensorLike], name: str) -> None:
    if not tensor.name.endswith(".bias"):
        return
    weight = tensors.get(tensor.name[: -len("bias")] + "weight")
    if weight is not None and len(weight.shape) == 2 and tuple(tensor.shape) != weight.shape[:1]:
        raise ConversionError(
            f"{name}: tensor '{tensor.name}' has the shape {list(tensor.shape)}; its weight "
            f"has {weight.shape[0]} rows."
        )
