"""GGUF weights kept as their raw block bytes, for the native kernels (native/, "Native kernels" in
docs/converter.md).

A `GgufWeight` is a [N, K] matrix as the GGUF file stores it: N rows of K / block_values blocks,
uint8 [N, row bytes]. The graph hands those bytes to the custom operator `chatapp.gguf.GgufMatMul`
unchanged, so the folder holds the GGUF's bytes per weight and a decode step reads no more.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

# Defined below convert and engine (both name them); exported here beside the op names.
from chatapp.folder_format.graph import NATIVE_DOMAIN as NATIVE_DOMAIN
from chatapp.folder_format.graph import NATIVE_FORMATS as NATIVE_FORMATS

NATIVE_OP = "GgufMatMul"
NATIVE_GATHER = "GgufGather"


def kernel_takes(qtype: str, k: int) -> bool:
    """Whether the library multiplies by rows of `k` values of `qtype` (whole blocks)."""
    formats = NATIVE_FORMATS.get(qtype)
    return formats is not None and k % formats[0] == 0


@dataclass(frozen=True)
class GgufWeight:
    """A [N, K] matrix in its GGUF blocks: `raw` is uint8 [N, K / block_values * block_bytes]."""

    qtype: str
    raw: np.ndarray
    k: int

    @property
    def n(self) -> int:
        return int(self.raw.shape[0])

    def rows(self, index: np.ndarray) -> GgufWeight:
        """The same weight with its output rows reordered (rows are whole blocks: exact)."""
        return GgufWeight(self.qtype, self.raw[index], self.k)

    def dequantize(self) -> np.ndarray:
        """The float32 matrix (gguf-py's dequantization: exact, as products of an f16 scale and
        a small integer are)."""
        qtype = gguf.GGMLQuantizationType[self.qtype]
        return np.asarray(gguf.quants.dequantize(self.raw, qtype), dtype=np.float32)


def native_weight(qtype: str, raw: np.ndarray, n: int, k: int) -> GgufWeight | None:
    """The GGUF rows as a GgufWeight when the library has a kernel for `qtype`, else None."""
    if not kernel_takes(qtype, k):
        return None
    values, size = NATIVE_FORMATS[qtype]
    rows = np.ascontiguousarray(raw, dtype=np.uint8).reshape(n, k // values * size)
    return GgufWeight(qtype, rows, k)


def concat_gguf(parts: list[object]) -> GgufWeight | None:
    """Stack GGUF weights of one format and width along N; None when they differ."""
    if not all(isinstance(p, GgufWeight) for p in parts):
        return None
    first = parts[0]
    assert isinstance(first, GgufWeight)
    ws = [p for p in parts if isinstance(p, GgufWeight)]
    if any((w.qtype, w.k) != (first.qtype, first.k) for w in ws):
        return None
    return GgufWeight(first.qtype, np.concatenate([w.raw for w in ws]), first.k)
