"""Open a GGUF file, check it is whole and of a supported architecture, and describe it."""

from __future__ import annotations

import math
import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chatapp.convert.architectures import SUPPORTED_ARCHITECTURES, unsupported_message
from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_reader import read_header, tensor_view
from chatapp.convert.validate import check_metadata, check_spec


@dataclass(frozen=True)
class DecoderSpec:
    """The hyper-parameters a Llama-style decoder needs, read from GGUF metadata."""

    architecture: str
    name: str
    n_layers: int
    hidden_size: int
    intermediate_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    context_length: int
    vocab_size: int
    rope_theta: float
    rms_eps: float
    rope_scaling_type: str  # "none" | "linear"
    rope_scaling_factor: float
    tied_embeddings: bool

    @property
    def qkv_size(self) -> int:
        return (self.n_heads + 2 * self.n_kv_heads) * self.head_dim


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    qtype: str  # GGML type name, e.g. "Q4_1"
    shape: tuple[int, ...]  # numpy order: (rows/out_features, in_features)
    data: np.ndarray  # raw: uint8 bytes per row for quantized types, values otherwise


class GGUFModel:
    """A validated GGUF file: metadata, tensors and the decoder spec."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.header, mm = read_header(self.path)
        self._map: mmap.mmap | None = getattr(mm, "_mmap", None)  # np.memmap's own map
        self.metadata = self.header.metadata
        self.tensors = {
            t.name: GGUFTensor(t.name, t.qtype, t.shape, tensor_view(mm, t))
            for t in self.header.tensors
        }
        check_metadata(self.metadata, self.path)
        try:
            self.spec = _spec_from_metadata(self.metadata, self.tensors, self.path)
        except (TypeError, ValueError, ArithmeticError) as exc:  # a family's reading of odd values
            raise ConversionError(f"{self.path.name} has inconsistent metadata ({exc}).") from exc
        check_spec(self.spec, self.tensors, self.path)

    def tensor(self, name: str) -> GGUFTensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise ConversionError(
                f"{self.path.name} has no tensor '{name}', which a Llama model needs."
            ) from None

    def has(self, name: str) -> bool:
        return name in self.tensors

    def release_pages(self) -> None:
        """Drop the pages of the file read so far from this process's resident memory.

        They stay in the page cache (a later read maps them again, without disk I/O), but
        while mapped they count in the process's RSS: reading a 4.6 GB file through the map
        would end with all of it counted. Called between layers by the converter."""
        if self._map is not None and hasattr(mmap, "MADV_DONTNEED") and not self._map.closed:
            self._map.madvise(mmap.MADV_DONTNEED)


def _spec_from_metadata(
    meta: dict[str, Any], tensors: dict[str, GGUFTensor], path: Path
) -> DecoderSpec:
    arch = str(meta.get("general.architecture", "unknown"))
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ConversionError(unsupported_message(path.name, arch))

    def need(key: str) -> Any:
        full = f"{arch}.{key}"
        if full not in meta:
            raise ConversionError(f"{path.name} lacks the metadata '{full}'.")
        return meta[full]

    hidden = int(need("embedding_length"))
    n_heads = int(need("attention.head_count"))
    n_kv = int(meta.get(f"{arch}.attention.head_count_kv", n_heads))
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden // n_heads))
    if head_dim % 16:
        # ONNX Runtime's GroupQueryAttention kernel refuses other head sizes at run time.
        raise ConversionError(
            f"{path.name} has {head_dim}-wide attention heads; ONNX Runtime's "
            "GroupQueryAttention needs a multiple of 16."
        )
    if n_heads % n_kv:
        raise ConversionError(f"{path.name}: {n_heads} heads do not split into {n_kv} KV groups.")
    scaling = str(meta.get(f"{arch}.rope.scaling.type", "none"))
    if scaling not in ("none", "linear"):
        raise ConversionError(
            f"{path.name} uses '{scaling}' RoPE scaling, which this converter does not support."
        )
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = int(meta.get(f"{arch}.vocab_size", len(tokens) if tokens else 0))
    n_layers = int(need("block_count"))
    return DecoderSpec(
        architecture=arch,
        name=str(meta.get("general.name", path.stem)),
        n_layers=n_layers,
        hidden_size=hidden,
        intermediate_size=int(need("feed_forward_length")),
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        context_length=int(need("context_length")),
        vocab_size=vocab,
        rope_theta=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(need("attention.layer_norm_rms_epsilon")),
        rope_scaling_type=scaling,
        rope_scaling_factor=float(meta.get(f"{arch}.rope.scaling.factor", 1.0) or 1.0),
        tied_embeddings="output.weight" not in tensors,
    )


def is_power_of_two(n: int) -> bool:
    return n > 0 and math.log2(n).is_integer()
