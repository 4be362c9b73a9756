"""GGUF tensor -> MatMulNBits/float weights: exact against gguf-py's own dequantization."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_file import GGUFTensor
from chatapp.convert.weights import (
    FloatWeight,
    NBitsWeight,
    Weight,
    concat_rows,
    to_weight,
    unpermute_rope_rows,
)
from tests.tiny_model import random_kquant

QType = gguf.GGMLQuantizationType
BLOCK_QUANTS = ("Q4_0", "Q4_1", "Q8_0")
K_QUANTS = ("Q4_K", "Q5_K", "Q6_K")


def quantized(qtype: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Raw GGUF bytes [rows, bytes per row] of a random matrix in `qtype`."""
    rng = np.random.default_rng(seed)
    if qtype in K_QUANTS:
        return random_kquant(rows, cols, qtype, rng)
    w = rng.normal(0.0, 0.5, size=(rows, cols)).astype(np.float32)
    return gguf.quants.quantize(w, QType[qtype])


def tensor(qtype: str, raw: np.ndarray, rows: int, cols: int, name: str = "w") -> GGUFTensor:
    return GGUFTensor(name, qtype, (rows, cols), raw)


def gguf_dequant(qtype: str, raw: np.ndarray) -> np.ndarray:
    return gguf.quants.dequantize(raw, QType[qtype]).astype(np.float32)


# --- exact dequantization --------------------------------------------------------------------


@pytest.mark.parametrize("qtype", BLOCK_QUANTS + K_QUANTS)
def test_quantized_weight_dequantizes_exactly_like_gguf(qtype: str) -> None:
    # K-quants need multiples of 256 along K; 768 = three super-blocks (odd on purpose).
    rows, cols = 24, 768 if qtype in K_QUANTS else 160
    raw = quantized(qtype, rows, cols)
    w = to_weight(tensor(qtype, raw, rows, cols))

    assert isinstance(w, NBitsWeight)
    assert (w.n, w.k) == (rows, cols)
    assert w.packed.dtype == np.uint8 and w.scales.dtype == np.float32
    expected = gguf_dequant(qtype, raw)
    assert expected.shape == (rows, cols)
    np.testing.assert_array_equal(w.dequantize(), expected)


@pytest.mark.parametrize(
    ("qtype", "bits", "block_size", "has_mins"),
    [
        ("Q4_0", 4, 32, False),
        ("Q4_1", 4, 32, True),
        ("Q8_0", 8, 32, False),
        ("Q4_K", 4, 32, True),
        ("Q5_K", 8, 32, True),
        ("Q6_K", 8, 16, False),
    ],
)
def test_quantized_weight_layout(qtype: str, bits: int, block_size: int, has_mins: bool) -> None:
    rows, cols = 8, 512
    w = to_weight(tensor(qtype, quantized(qtype, rows, cols), rows, cols))
    assert isinstance(w, NBitsWeight)
    assert (w.bits, w.block_size) == (bits, block_size)
    assert (w.mins is not None) == has_mins
    blocks = cols // block_size
    assert w.packed.shape == (rows, blocks, block_size * bits // 8)
    assert w.scales.shape == (rows, blocks)
    codes = w.unpacked()
    assert codes.shape == (rows, cols)
    # Q5_K codes are 5-bit and Q6_K 6-bit although they travel in 8-bit MatMulNBits, shifted
    # around its default zero point 128 (q + 128, q + 96), so they need no zero points.
    low, high = {"Q5_K": (128, 160), "Q6_K": (96, 160)}.get(qtype, (0, 1 << bits))
    assert low <= int(codes.min()) and int(codes.max()) < high
    if qtype in ("Q5_K", "Q6_K"):
        assert w.zero_points is None


def test_f32_and_f16_are_kept_as_floats() -> None:
    rng = np.random.default_rng(1)
    w32 = rng.normal(size=(6, 40)).astype(np.float32)
    f32 = to_weight(tensor("F32", w32, 6, 40))
    assert isinstance(f32, FloatWeight)
    np.testing.assert_array_equal(f32.dequantize(), w32)

    w16 = w32.astype(np.float16)
    f16 = to_weight(tensor("F16", w16, 6, 40))
    assert isinstance(f16, FloatWeight)
    assert f16.dequantize().dtype == np.float32
    np.testing.assert_array_equal(f16.dequantize(), w16.astype(np.float32))


@pytest.mark.parametrize("as_uint16", [False, True], ids=["bytes", "uint16"])
def test_bf16_is_widened_exactly(as_uint16: bool) -> None:
    rng = np.random.default_rng(2)
    raw = gguf.quants.quantize(rng.normal(size=(5, 48)).astype(np.float32), QType.BF16)
    data = raw.view(np.uint16) if as_uint16 else raw
    w = to_weight(tensor("BF16", data, 5, 48))
    assert isinstance(w, FloatWeight)
    np.testing.assert_array_equal(w.dequantize(), gguf_dequant("BF16", raw))


@pytest.mark.parametrize("qtype", ["IQ2_XXS", "IQ3_S", "TQ1_0"])
def test_unsupported_type_raises_naming_it(qtype: str) -> None:
    rows, cols = 4, 256
    elems, nbytes = gguf.GGML_QUANT_SIZES[QType[qtype]]
    raw = np.zeros((rows, cols // elems * nbytes), dtype=np.uint8)
    with pytest.raises(ConversionError, match=rf"blk\.3\.ffn_up\.weight.*{qtype}"):
        to_weight(tensor(qtype, raw, rows, cols, name="blk.3.ffn_up.weight"))


def test_non_matrix_tensor_is_refused() -> None:
    t = GGUFTensor("blk.0.attn_norm.weight", "F32", (64,), np.ones(64, np.float32))
    with pytest.raises(ConversionError, match="2-D"):
        to_weight(t)


# --- Q/K row permutation ---------------------------------------------------------------------


def llama_cpp_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """What convert_hf_to_gguf.py does to Q/K: rows (heads, 2, D/2) -> (heads, D/2, 2)."""
    rows = w.shape[0]
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("qtype", ["F32", *BLOCK_QUANTS, *K_QUANTS])
@pytest.mark.parametrize("n_heads", [1, 3])
def test_unpermute_rope_rows_inverts_llama_cpp(qtype: str, n_heads: int) -> None:
    head_dim, cols = 16, 256
    rows = n_heads * head_dim
    if qtype == "F32":
        hf_raw = np.random.default_rng(3).normal(size=(rows, cols)).astype(np.float32)
    else:
        hf_raw = quantized(qtype, rows, cols, seed=3)
    # Quantization is per row, so permuting the quantized rows permutes the matrix.
    gguf_raw = llama_cpp_permute(hf_raw, n_heads)
    assert not np.array_equal(gguf_raw, hf_raw)

    w = unpermute_rope_rows(to_weight(tensor(qtype, gguf_raw, rows, cols)), n_heads)

    assert type(w) is type(to_weight(tensor(qtype, hf_raw, rows, cols)))
    np.testing.assert_array_equal(
        w.dequantize(), to_weight(tensor(qtype, hf_raw, rows, cols)).dequantize()
    )


def test_unpermuted_rows_turn_interleaved_rope_into_rotate_half() -> None:
    """The reason for the permutation: llama.cpp's pairwise RoPE on GGUF rows equals HF's
    rotate-half RoPE on the un-permuted rows (up to the same row order)."""
    n_heads, head_dim, cols = 2, 8, 12
    rng = np.random.default_rng(4)
    w_gguf = rng.normal(size=(n_heads * head_dim, cols)).astype(np.float32)
    x = rng.normal(size=cols).astype(np.float32)
    w_hf = unpermute_rope_rows(FloatWeight(w_gguf), n_heads).dequantize()
    angles = 0.7 * np.arange(head_dim // 2) + 0.3
    cos, sin = np.cos(angles), np.sin(angles)

    q = (w_gguf @ x).reshape(n_heads, head_dim // 2, 2)  # interleaved pairs (2i, 2i+1)
    interleaved = np.stack(
        [q[..., 0] * cos - q[..., 1] * sin, q[..., 1] * cos + q[..., 0] * sin], axis=-1
    )
    h = (w_hf @ x).reshape(n_heads, 2, head_dim // 2)  # halves (i, i + D/2)
    rotate_half = np.stack([h[:, 0] * cos - h[:, 1] * sin, h[:, 1] * cos + h[:, 0] * sin], 1)

    # Same rotated vector, rows in the (heads, D/2, 2) vs (heads, 2, D/2) order.
    np.testing.assert_allclose(interleaved, rotate_half.swapaxes(1, 2), rtol=1e-5, atol=1e-5)


# --- fusing and zero points ------------------------------------------------------------------


def weights_of(qtype: str, row_counts: list[int], cols: int = 256) -> list[Weight]:
    return [
        to_weight(tensor(qtype, quantized(qtype, n, cols, seed=i), n, cols))
        for i, n in enumerate(row_counts)
    ]


@pytest.mark.parametrize("qtype", ["Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"])
def test_concat_rows_fuses_same_format(qtype: str) -> None:
    parts = weights_of(qtype, [32, 16, 16])
    fused = concat_rows(parts)
    assert isinstance(fused, NBitsWeight)
    assert (fused.n, fused.k) == (64, 256)
    np.testing.assert_array_equal(
        fused.dequantize(), np.concatenate([p.dequantize() for p in parts])
    )


def test_concat_rows_fuses_floats() -> None:
    a, b = FloatWeight(np.ones((2, 4), np.float32)), FloatWeight(np.zeros((3, 4), np.float32))
    fused = concat_rows([a, b])
    assert isinstance(fused, FloatWeight)
    np.testing.assert_array_equal(fused.w, np.concatenate([a.w, b.w]))


@pytest.mark.parametrize(
    "formats",
    [("Q4_0", "Q8_0"), ("Q4_0", "Q4_1"), ("Q8_0", "Q5_K"), ("Q8_0", "Q6_K"), ("Q4_0", "F32")],
)
def test_concat_rows_refuses_mixed_formats(formats: tuple[str, str]) -> None:
    parts = [weights_of(q, [16])[0] for q in formats]
    assert concat_rows(parts) is None
    assert concat_rows(parts[::-1]) is None


def test_concat_rows_fuses_different_gguf_types_with_one_layout() -> None:
    """Q4_1 and Q4_K both become 4-bit, 32-wide blocks with zero point 0 and a block minimum."""
    parts = [weights_of("Q4_1", [16])[0], weights_of("Q4_K", [8])[0]]
    fused = concat_rows(parts)
    assert isinstance(fused, NBitsWeight)
    np.testing.assert_array_equal(
        fused.dequantize(), np.concatenate([p.dequantize() for p in parts])
    )


def nbits4(zero_points: np.ndarray | None, blocks: int) -> NBitsWeight:
    n = 2
    return NBitsWeight(
        bits=4,
        block_size=32,
        packed=np.zeros((n, blocks, 16), np.uint8),
        scales=np.ones((n, blocks), np.float32),
        zero_points=zero_points,
        mins=None,
    )


@pytest.mark.parametrize("blocks", [1, 3, 4, 5])
def test_packed_zero_points_two_per_byte(blocks: int) -> None:
    zp = np.random.default_rng(blocks).integers(0, 16, size=(2, blocks), dtype=np.uint8)
    packed = nbits4(zp, blocks).packed_zero_points()
    assert packed is not None
    assert packed.dtype == np.uint8
    assert packed.shape == (2, (blocks + 1) // 2)
    lo, hi = packed & 0x0F, packed >> 4
    unpacked = np.stack([lo, hi], axis=-1).reshape(2, -1)
    np.testing.assert_array_equal(unpacked[:, :blocks], zp)
    if blocks % 2:
        assert not hi[:, -1].any()  # the padding nibble is zero


def test_packed_zero_points_8bit_and_default() -> None:
    assert nbits4(None, 3).packed_zero_points() is None
    zp = np.arange(6, dtype=np.uint8).reshape(2, 3)
    w8 = NBitsWeight(8, 32, np.zeros((2, 3, 32), np.uint8), np.ones((2, 3), np.float32), zp, None)
    packed = w8.packed_zero_points()
    assert packed is not None
    np.testing.assert_array_equal(packed, zp)
