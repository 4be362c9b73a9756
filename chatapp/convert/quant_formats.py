"""More GGUF block formats as integer codes + per-block scales, still without losing a bit.

Each decoder turns raw GGUF bytes [N, bytes per row] into `Blocks`: codes q (uint8 [N, K]) and,
per block along K, a scale, an optional zero point and an optional additive minimum, so that
w = scale * (q - zero_point) + min equals gguf's own dequantization bit for bit. Products of an
f16 scale (11 significant bits) and a code below 256 fit float32 exactly, which is why the order
of operations does not matter here.

- Q5_0 / Q5_1 (32-wide blocks, 5-bit codes) travel as 8-bit codes.
- Q2_K / Q3_K (256-wide super-blocks of 16-wide sub-blocks) keep their 2-/3-bit codes in 4-bit
  cells with one scale (and minimum) per 16 weights; ONNX Runtime's 2-bit MatMulNBits has no fast
  float path, its 4-bit one has.
- IQ4_NL / IQ4_XS look their 4-bit indices up in a fixed table of 16 integers in -127..113; the
  table value itself is the 8-bit code, so these are exact as well.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# The non-uniform grid of IQ4_NL / IQ4_XS (ggml's kvalues_iq4nl).
IQ4_GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113])


@dataclass(frozen=True)
class Blocks:
    bits: int  # 4 or 8: the MatMulNBits cell width the codes travel in
    block_size: int
    codes: np.ndarray  # uint8 [N, K], each < 2**bits
    scales: np.ndarray  # float32 [N, K/block]
    zero_points: np.ndarray | None  # uint8 [N, K/block]; None = the op's default (2**(bits-1))
    mins: np.ndarray | None  # float32 [N, K/block]; None = no offset


def _f16(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


def _five_bit(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1 codes [..., 32]: element i is nibble i of qs (low nibbles first) | bit i of qh."""
    low = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    bits = np.ascontiguousarray(qh).view(np.uint32)  # [..., 1], little-endian like ggml
    high = ((bits >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
    codes: np.ndarray = (low | (high << 4)).astype(np.uint8)
    return codes


def q5_0(raw: np.ndarray, n: int, k: int) -> Blocks:
    b = raw.reshape(n, k // 32, 22)
    q = _five_bit(b[..., 2:6], b[..., 6:22])
    # w = d * (q - 16); q + 112 against the 8-bit default zero point 128 needs no zero points.
    codes = (q + 112).astype(np.uint8).reshape(n, k)
    return Blocks(8, 32, codes, _f16(b[..., 0:2]), None, None)


def q5_1(raw: np.ndarray, n: int, k: int) -> Blocks:
    b = raw.reshape(n, k // 32, 24)
    # w = d * q + m: q + 128 against the default zero point 128 needs no zero points.
    q = (_five_bit(b[..., 4:8], b[..., 8:24]) + 128).astype(np.uint8).reshape(n, k)
    return Blocks(8, 32, q, _f16(b[..., 0:2]), None, _f16(b[..., 2:4]))


def _two_bit_codes(qs: np.ndarray) -> np.ndarray:
    """[..., 64] bytes -> [..., 256] 2-bit codes in Q2_K/Q3_K order (two halves of 4 x 32)."""
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]
    g = qs.reshape((*qs.shape[:-1], 2, 1, 32)) >> shifts
    return (g & 3).reshape((*qs.shape[:-1], 256))


def q2_k(raw: np.ndarray, n: int, k: int) -> Blocks:
    b = raw.reshape(n, k // 256, 84)
    sc = b[..., 0:16]
    d, dmin = _f16(b[..., 80:82]), _f16(b[..., 82:84])
    codes = _two_bit_codes(b[..., 16:80]).reshape(n, k)
    scales = (d[..., None] * (sc & 0x0F).astype(np.float32)).reshape(n, -1)
    mins = (-(dmin[..., None] * (sc >> 4).astype(np.float32))).reshape(n, -1)
    zeros = np.zeros_like(scales, dtype=np.uint8)
    return Blocks(4, 16, codes, scales, zeros, mins)


def _q3_k_scales(s: np.ndarray) -> np.ndarray:
    """The 16 six-bit scales packed in 12 bytes, minus their offset of 32, as float32."""
    low = (s[..., 0:8, None] >> np.array([0, 4], dtype=np.uint8)).swapaxes(-1, -2)
    low = low.reshape((*s.shape[:-1], 16)) & 0x0F
    high = (s[..., None, 8:12] >> np.array([0, 2, 4, 6], dtype=np.uint8)[:, None]) & 3
    high = high.reshape((*s.shape[:-1], 16))
    return ((low | (high << 4)).astype(np.float32)) - 32


def q3_k(raw: np.ndarray, n: int, k: int) -> Blocks:
    b = raw.reshape(n, k // 256, 110)
    hmask, qs, sc = b[..., 0:32], b[..., 32:96], b[..., 96:108]
    d = _f16(b[..., 108:110])
    low = _two_bit_codes(qs)
    # Bit j of hmask[l] belongs to element 32 j + l; a set bit means "no -4".
    high = (hmask[..., None, :] >> np.arange(8, dtype=np.uint8)[:, None]) & 1
    high = high.reshape((*hmask.shape[:-1], 256))
    # q = low - 4 (1 - high) in -4..3; + 8 against the 4-bit default zero point 8.
    codes = (low + 4 * high + 4).astype(np.uint8).reshape(n, k)
    scales = (d[..., None] * _q3_k_scales(sc)).reshape(n, -1)
    return Blocks(4, 16, codes, scales, None, None)


def _grid_codes(nibbles: np.ndarray) -> np.ndarray:
    codes: np.ndarray = (IQ4_GRID[nibbles] + 128).astype(np.uint8)
    return codes


def iq4_nl(raw: np.ndarray, n: int, k: int) -> Blocks:
    b = raw.reshape(n, k // 32, 18)
    qs = b[..., 2:18]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    return Blocks(8, 32, _grid_codes(nibbles).reshape(n, k), _f16(b[..., 0:2]), None, None)


def iq4_xs(raw: np.ndarray, n: int, k: int) -> Blocks:
    b = raw.reshape(n, k // 256, 136)
    d = _f16(b[..., 0:2])
    high = np.ascontiguousarray(b[..., 2:4]).view(np.uint16)  # [..., 1]
    high = ((high >> (2 * np.arange(8, dtype=np.uint16))) & 3).astype(np.uint8)
    low = (b[..., 4:8, None] >> np.array([0, 4], dtype=np.uint8)) & 0x0F
    low = low.reshape((*b.shape[:-1], 8))
    ls = (low | (high << 4)).astype(np.float32) - 32
    qs = b[..., 8:136].reshape((*b.shape[:-1], 8, 16))
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # [..., 8 sub-blocks, 32]
    scales = (d[..., None] * ls).reshape(n, -1)
    return Blocks(8, 32, _grid_codes(nibbles).reshape(n, k), scales, None, None)


DECODERS: dict[str, Callable[[np.ndarray, int, int], Blocks]] = {
    "Q5_0": q5_0,
    "Q5_1": q5_1,
    "Q2_K": q2_k,
    "Q3_K": q3_k,
    "IQ4_NL": iq4_nl,
    "IQ4_XS": iq4_xs,
}
