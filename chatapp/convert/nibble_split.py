"""8-bit weights as 4-bit ones over the input twice: same values, ONNX Runtime's fast kernel.

With float activations (accuracy_level 0), ONNX Runtime's MatMulNBits runs 4-bit weights about
five times faster than 8-bit ones (docs/converter.md). A code c in 0..255 is lo + 16 hi with two
4-bit halves, so with the input repeated, [x, x] @ [lo-part | hi-part]^T is
  sum_k x_k s (lo_k - 0) + x_k 16 s (hi_k - zp/16) = sum_k x_k s (c_k - zp),
the 8-bit weight exactly, whenever the zero point is a multiple of 16 (128, 32 and 0 are: Q8_0,
Q5_0, IQ4_NL/IQ4_XS, Q6_K, Q5_K, Q5_1). Each half's values s*lo and 16 s*(hi - zp/16) are
products of an f16 scale and a small integer, exact in float32.
"""

from __future__ import annotations

import numpy as np

from chatapp.convert.weights import NBitsWeight


def two_nibbles(w: NBitsWeight) -> NBitsWeight | None:
    """`w` (8-bit) as a 4-bit weight of width 2K for the input [x, x]; None when not exact."""
    if w.bits != 8:
        return None
    blocks = w.k // w.block_size
    zp = (
        np.full((w.n, blocks), w.default_zero_point, np.uint8)
        if w.zero_points is None
        else w.zero_points
    )
    if np.any(zp % 16):
        return None
    codes = w.unpacked()
    halves = np.concatenate([codes & 0x0F, codes >> 4], axis=1)  # [N, 2K]
    pairs = halves.reshape(w.n, -1, w.block_size // 2, 2)
    packed = (pairs[..., 0] | (pairs[..., 1] << 4)).astype(np.uint8)
    scales = np.concatenate([w.scales, w.scales * np.float32(16)], axis=1)
    zero_points = np.concatenate([np.zeros_like(zp), zp // 16], axis=1).astype(np.uint8)
    return NBitsWeight(4, w.block_size, packed, scales, zero_points, None)
