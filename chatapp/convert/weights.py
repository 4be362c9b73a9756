"""GGUF tensors as ONNX Runtime weights: block-quantized (MatMulNBits layout) or float.

Every GGUF type handled here maps *exactly* onto w = scale * (q - zero_point) + min per block:
Q4_0, Q4_1, Q8_0 directly; the K-quants by unpacking their sub-block scales (Q4_K -> 4 bit,
Q5_K -> 8 bit, Q6_K -> 8 bit with 16-wide blocks). `min` is not something MatMulNBits has, so
the graph adds it back as blocksum(x) @ min^T (see decoder_graph.py); this keeps the fast integer
path. 8-bit codes are shifted to sit around MatMulNBits' default zero point 128 wherever the
format's own zero point is a constant (Q5_K: 0, Q6_K: 32), so no zero-point tensor is stored
(1/16 byte per weight less for Q6_K's 16-wide blocks, 1/32 for Q5_K's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from chatapp.convert import quant_formats
from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_blocks import GgufWeight, concat_gguf
from chatapp.convert.gguf_file import GGUFTensor

FLOAT_TYPES = ("F32", "F16", "BF16")
QUANT_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", *quant_formats.DECODERS)
SUPPORTED_TYPES = FLOAT_TYPES + QUANT_TYPES


@dataclass(frozen=True)
class NBitsWeight:
    """A [N, K] matrix quantized in blocks along K, as MatMulNBits wants it."""

    bits: int
    block_size: int
    packed: np.ndarray  # uint8 [N, K/block, block*bits/8], low bits first
    scales: np.ndarray  # float32 [N, K/block]
    zero_points: np.ndarray | None  # uint8 [N, K/block] unpacked; None = the op's default
    mins: np.ndarray | None  # float32 [N, K/block] added per block; None = no offset

    @property
    def n(self) -> int:
        return int(self.packed.shape[0])

    @property
    def k(self) -> int:
        return int(self.packed.shape[1] * self.block_size)

    @property
    def default_zero_point(self) -> int:
        return 1 << (self.bits - 1)

    def unpacked(self) -> np.ndarray:
        """The integer codes q as uint8 [N, K]."""
        if self.bits == 8:
            return self.packed.reshape(self.n, self.k)
        lo = self.packed & 0x0F
        hi = self.packed >> 4
        return np.stack([lo, hi], axis=-1).reshape(self.n, self.k)

    def dequantize(self) -> np.ndarray:
        """The float32 matrix [N, K] these blocks stand for."""
        out = np.empty((self.n, self.k), dtype=np.float32)
        # A few thousand rows at a time: a 49k x 4096 output matrix then needs its own 805 MB,
        # not four float32 copies of it (the converter's peak memory, docs/converter.md).
        step = max(1, (4 << 20) // max(1, self.k))
        for start in range(0, self.n, step):
            rows = slice(start, start + step)
            part = replace(
                self,
                packed=self.packed[rows],
                scales=self.scales[rows],
                zero_points=None if self.zero_points is None else self.zero_points[rows],
                mins=None if self.mins is None else self.mins[rows],
            )
            out[rows] = part._dequantize_all()
        return out

    def _dequantize_all(self) -> np.ndarray:
        q = self.unpacked().astype(np.float32).reshape(self.n, -1, self.block_size)
        zp = (
            np.float32(self.default_zero_point)
            if self.zero_points is None
            else self.zero_points.astype(np.float32)[..., None]
        )
        w = (q - zp) * self.scales[..., None]
        if self.mins is not None:
            w = w + self.mins[..., None]
        return w.reshape(self.n, self.k)

    def rows(self, index: np.ndarray) -> NBitsWeight:
        """The same weight with its output rows reordered."""
        return replace(
            self,
            packed=self.packed[index],
            scales=self.scales[index],
            zero_points=None if self.zero_points is None else self.zero_points[index],
            mins=None if self.mins is None else self.mins[index],
        )

    def packed_zero_points(self) -> np.ndarray | None:
        """Zero points in MatMulNBits' packed form (4-bit: two per byte)."""
        if self.zero_points is None:
            return None
        if self.bits == 8:
            return self.zero_points
        zp = self.zero_points
        if zp.shape[1] % 2:
            zp = np.pad(zp, ((0, 0), (0, 1)))
        return (zp[:, 0::2] | (zp[:, 1::2] << 4)).astype(np.uint8)


@dataclass(frozen=True)
class FloatWeight:
    """A [N, K] float32 matrix kept unquantized (the GGUF had it in F32/F16/BF16)."""

    w: np.ndarray

    @property
    def n(self) -> int:
        return int(self.w.shape[0])

    @property
    def k(self) -> int:
        return int(self.w.shape[1])

    def dequantize(self) -> np.ndarray:
        return self.w

    def rows(self, index: np.ndarray) -> FloatWeight:
        return FloatWeight(self.w[index])


Weight = NBitsWeight | FloatWeight | GgufWeight  # GgufWeight: raw blocks, native kernels


def concat_rows(parts: list[Weight]) -> Weight | None:
    """Stack weights along N (fused QKV, gate+up); None when their formats differ."""
    first = parts[0]
    if any(isinstance(p, GgufWeight) for p in parts):
        return concat_gguf(list(parts))
    if all(isinstance(p, FloatWeight) for p in parts):
        return FloatWeight(np.concatenate([p.w for p in parts]))  # type: ignore[union-attr]
    if not all(isinstance(p, NBitsWeight) for p in parts):
        return None
    nb = [p for p in parts if isinstance(p, NBitsWeight)]
    assert isinstance(first, NBitsWeight)
    same = all(
        (p.bits, p.block_size, p.zero_points is None, p.mins is None)
        == (first.bits, first.block_size, first.zero_points is None, first.mins is None)
        for p in nb
    )
    if not same:
        return None

    def cat(field: str) -> np.ndarray | None:
        arrays = [getattr(p, field) for p in nb]
        return None if arrays[0] is None else np.concatenate(arrays)

    return NBitsWeight(
        bits=first.bits,
        block_size=first.block_size,
        packed=np.concatenate([p.packed for p in nb]),
        scales=cat("scales"),  # type: ignore[arg-type]
        zero_points=cat("zero_points"),
        mins=cat("mins"),
    )


def to_weight(t: GGUFTensor) -> Weight:
    """Convert one 2-D GGUF tensor (rows = output features) without losing precision."""
    if len(t.shape) != 2:
        raise ConversionError(f"Tensor '{t.name}' has shape {t.shape}; a 2-D matrix was expected.")
    n, k = t.shape
    if t.qtype in FLOAT_TYPES:
        return FloatWeight(_float_matrix(t))
    decode = _DECODERS.get(t.qtype) or _from_blocks(quant_formats.DECODERS.get(t.qtype))
    if decode is None:
        raise ConversionError(
            f"Tensor '{t.name}' is stored as {t.qtype}, which this converter does not support "
            f"(supported: {', '.join(SUPPORTED_TYPES)})."
        )
    raw = np.ascontiguousarray(t.data, dtype=np.uint8).reshape(n, -1)
    return decode(raw, n, k)


def _float_matrix(t: GGUFTensor) -> np.ndarray:
    if t.qtype == "BF16":
        bits = np.ascontiguousarray(t.data).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(t.shape)
    return np.asarray(t.data, dtype=np.float32).reshape(t.shape)


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


def _pack4(q: np.ndarray, n: int, block: int) -> np.ndarray:
    """uint8 codes [N, K] (values < 16) -> [N, K/block, block/2], even index in the low nibble."""
    q = q.reshape(n, -1, block // 2, 2)
    return (q[..., 0] | (q[..., 1] << 4)).astype(np.uint8)


def _q4_0(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    b = raw.reshape(n, k // 32, 18)
    qs = b[..., 2:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # GGUF: low nibbles are 0..15
    return NBitsWeight(4, 32, _pack4(q, n, 32), _f16(b[..., 0:2]), None, None)


def _q4_1(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    b = raw.reshape(n, k // 32, 20)
    qs = b[..., 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    zeros = np.zeros((n, k // 32), dtype=np.uint8)
    return NBitsWeight(4, 32, _pack4(q, n, 32), _f16(b[..., 0:2]), zeros, _f16(b[..., 2:4]))


def _q8_0(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    b = raw.reshape(n, k // 32, 34)
    q = (b[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    return NBitsWeight(8, 32, q, _f16(b[..., 0:2]), None, None)


def _k_scales_mins(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit (scale, min) pairs packed in 12 bytes of a Q4_K/Q5_K super-block."""
    s = sc.astype(np.uint8)
    scales = np.empty((*s.shape[:-1], 8), dtype=np.uint8)
    mins = np.empty_like(scales)
    scales[..., :4] = s[..., 0:4] & 63
    mins[..., :4] = s[..., 4:8] & 63
    scales[..., 4:] = (s[..., 8:12] & 0x0F) | ((s[..., 0:4] >> 6) << 4)
    mins[..., 4:] = (s[..., 8:12] >> 4) | ((s[..., 4:8] >> 6) << 4)
    return scales.astype(np.float32), mins.astype(np.float32)


def _k_low_nibbles(qs: np.ndarray) -> np.ndarray:
    """[..., 128] bytes -> [..., 8 sub-blocks, 32] low 4-bit codes (Q4_K/Q5_K order)."""
    g = qs.reshape((*qs.shape[:-1], 4, 32))
    return np.stack([g & 0x0F, g >> 4], axis=-2).reshape((*qs.shape[:-1], 8, 32))


def _q4_k(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    b = raw.reshape(n, k // 256, 144)
    d, dmin = _f16(b[..., 0:2]), _f16(b[..., 2:4])
    sc, m = _k_scales_mins(b[..., 4:16])
    q = _k_low_nibbles(b[..., 16:144]).reshape(n, k)
    scales = (d[..., None] * sc).reshape(n, -1)
    mins = (-(dmin[..., None] * m)).reshape(n, -1)
    zeros = np.zeros_like(scales, dtype=np.uint8)
    return NBitsWeight(4, 32, _pack4(q, n, 32), scales, zeros, mins)


def _q5_k(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    b = raw.reshape(n, k // 256, 176)
    d, dmin = _f16(b[..., 0:2]), _f16(b[..., 2:4])
    sc, m = _k_scales_mins(b[..., 4:16])
    qh = b[..., 16:48]  # bit j of qh[l] is the fifth bit of element l of sub-block j
    low = _k_low_nibbles(b[..., 48:176])
    high = (qh[..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1
    # q + 128 against the default zero point 128: w = s * q + min, no zero-point tensor.
    q = ((low | (high << 4)) + 128).astype(np.uint8).reshape(n, k // 32, 32)
    scales = (d[..., None] * sc).reshape(n, -1)
    mins = (-(dmin[..., None] * m)).reshape(n, -1)
    return NBitsWeight(8, 32, q, scales, None, mins)


def _q6_k(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
    b = raw.reshape(n, k // 256, 210)
    ql, qh = b[..., 0:128], b[..., 128:192]
    sc = b[..., 192:208].view(np.int8).astype(np.float32)
    d = _f16(b[..., 208:210])
    ql = ql.reshape((*ql.shape[:-1], 2, 1, 64)) >> np.array([0, 4], np.uint8)[:, None]
    ql = (ql & 0x0F).reshape(n, k // 256, 2, 4, 32)  # [half, quarter, 32]
    qh = qh.reshape((*qh.shape[:-1], 2, 1, 32)) >> np.array([0, 2, 4, 6], np.uint8)[:, None]
    qh = (qh & 0x03).reshape(n, k // 256, 2, 4, 32)
    # w = d * sc * (q - 32): q + 96 against the default zero point 128, no zero-point tensor.
    q = ((ql | (qh << 4)) + 96).astype(np.uint8).reshape(n, k // 16, 16)
    scales = (d[..., None] * sc).reshape(n, -1)
    return NBitsWeight(8, 16, q, scales, None, None)


def _from_blocks(
    decode: Callable[[np.ndarray, int, int], quant_formats.Blocks] | None,
) -> Callable[[np.ndarray, int, int], NBitsWeight] | None:
    if decode is None:
        return None

    def to_nbits(raw: np.ndarray, n: int, k: int) -> NBitsWeight:
        b = decode(raw, n, k)
        packed = _pack4(b.codes, n, b.block_size) if b.bits == 4 else b.codes
        packed = packed.reshape(n, k // b.block_size, -1)
        return NBitsWeight(b.bits, b.block_size, packed, b.scales, b.zero_points, b.mins)

    return to_nbits


_DECODERS = {
    "Q4_0": _q4_0,
    "Q4_1": _q4_1,
    "Q8_0": _q8_0,
    "Q4_K": _q4_k,
    "Q5_K": _q5_k,
    "Q6_K": _q6_k,
}


def unpermute_rope_rows(w: Weight, n_heads: int) -> Weight:
    """Undo llama.cpp's Q/K row permutation so RoPE is the rotate-half form again.

    GGUF rows of a head are ordered (D/2, 2) for interleaved RoPE; Hugging Face's are (2, D/2).
    Blocks run along K, so reordering rows is exact for every format.
    """
    head_dim = w.n // n_heads
    index = np.arange(w.n).reshape(n_heads, head_dim // 2, 2).swapaxes(1, 2).reshape(-1)
    return w.rows(index)
