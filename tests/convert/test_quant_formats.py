"""Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS and the type mixes of llama.cpp's presets.

Each type must dequantize exactly like gguf-py, keep its codes in a MatMulNBits layout, and a tiny
model stored in it must give the numpy reference's logits (max |diff| and the argmax at every
position), as linear weights, as the embedding and as an untied output.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.gguf_file import GGUFTensor
from chatapp.convert.nibble_split import two_nibbles
from chatapp.convert.quant_formats import IQ4_GRID
from chatapp.convert.weights import NBitsWeight, concat_rows, to_weight, unpermute_rope_rows
from chatapp.folder_format.graph import all_nodes
from tests.convert.reference import ReferenceModel
from tests.convert.test_families import assert_matches, full_pass, prompt
from tests.convert.test_graph import (
    EXACT,
    STEP_TOLERANCE,
    Converted,
    assert_matches_reference,
    reference_logits,
)
from tests.tiny_families import FAMILIES as TINY_FAMILIES
from tests.tiny_families import write_family_gguf
from tests.tiny_model import random_kquant

QType = gguf.GGMLQuantizationType
NEW_TYPES = ("Q5_0", "Q5_1", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS")
SUPER_BLOCK_TYPES = ("Q2_K", "Q3_K", "IQ4_XS", "Q4_K", "Q5_K", "Q6_K")  # 256 wide along K
K_DIMS: dict[str, Any] = {"hidden": 256, "ffn": 512}


def dims(qtype: str) -> dict[str, Any]:
    return K_DIMS if qtype in SUPER_BLOCK_TYPES else {}


def weight(qtype: str, raw: np.ndarray, rows: int, cols: int) -> NBitsWeight:
    w = to_weight(GGUFTensor("w", qtype, (rows, cols), raw))
    assert isinstance(w, NBitsWeight)
    return w


def random_blocks(qtype: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    return random_kquant(rows, cols, qtype, np.random.default_rng(seed))


# --- exact dequantization ----------------------------------------------------------------------


@pytest.mark.parametrize("qtype", NEW_TYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dequantizes_exactly_like_gguf(qtype: str, seed: int) -> None:
    rows, cols = 24, 768  # three super-blocks (odd on purpose) or 24 blocks of 32
    raw = random_blocks(qtype, rows, cols, seed)
    expected = gguf.quants.dequantize(raw, QType[qtype]).astype(np.float32)
    got = weight(qtype, raw, rows, cols).dequantize()
    assert got.shape == expected.shape == (rows, cols)
    np.testing.assert_array_equal(got, expected)  # max |difference| = 0


@pytest.mark.parametrize("qtype", ["Q5_0", "Q5_1"])
def test_gguf_quantized_blocks_are_exact(qtype: str) -> None:
    # Blocks from gguf-py's own quantizer (real-looking data, not random bytes).
    w = np.random.default_rng(5).normal(0.0, 0.3, size=(16, 320)).astype(np.float32)
    raw = gguf.quants.quantize(w, QType[qtype])
    expected = gguf.quants.dequantize(raw, QType[qtype])
    np.testing.assert_array_equal(weight(qtype, raw, 16, 320).dequantize(), expected)


@pytest.mark.parametrize(
    ("qtype", "bits", "block_size", "zero_points", "mins", "code_range"),
    [
        ("Q5_0", 8, 32, False, False, (112, 143)),  # q + 112 against the default zero point 128
        ("Q5_1", 8, 32, False, True, (128, 159)),  # q + 128, the default zero point
        ("Q2_K", 4, 16, True, True, (0, 3)),
        ("Q3_K", 4, 16, False, False, (4, 11)),  # q + 8 against the default zero point 8
        ("IQ4_NL", 8, 32, False, False, (1, 241)),  # the grid value + 128
        ("IQ4_XS", 8, 32, False, False, (1, 241)),
    ],
)
def test_layout(
    qtype: str,
    bits: int,
    block_size: int,
    zero_points: bool,
    mins: bool,
    code_range: tuple[int, int],
) -> None:
    rows, cols = 8, 512
    w = weight(qtype, random_blocks(qtype, rows, cols), rows, cols)
    assert (w.bits, w.block_size) == (bits, block_size)
    assert (w.zero_points is not None, w.mins is not None) == (zero_points, mins)
    assert w.packed.shape == (rows, cols // block_size, block_size * bits // 8)
    assert w.scales.shape == (rows, cols // block_size)
    codes = w.unpacked()
    assert code_range[0] <= int(codes.min()) and int(codes.max()) <= code_range[1]
    if qtype.startswith("IQ4"):
        assert set(np.unique(codes)) <= set((IQ4_GRID + 128).tolist())


@pytest.mark.parametrize("qtype", NEW_TYPES)
def test_rows_reorder_and_fuse(qtype: str) -> None:
    """Q/K un-permutation and QKV fusing work on every type (both move whole rows)."""
    a = weight(qtype, random_blocks(qtype, 32, 256, 1), 32, 256)
    b = weight(qtype, random_blocks(qtype, 16, 256, 2), 16, 256)
    fused = concat_rows([a, b])
    assert fused is not None
    np.testing.assert_array_equal(
        fused.dequantize(), np.concatenate([a.dequantize(), b.dequantize()])
    )
    index = np.arange(32).reshape(2, 8, 2).swapaxes(1, 2).reshape(-1)
    np.testing.assert_array_equal(unpermute_rope_rows(a, 2).dequantize(), a.dequantize()[index])


def test_nan_scales_stay_nan() -> None:
    # A damaged scale is not silently turned into a number (another module refuses NaN weights).
    raw = random_blocks("Q5_0", 2, 64)
    raw[0, 0:2] = np.array([np.nan], np.float16).view(np.uint8)
    assert np.isnan(weight("Q5_0", raw, 2, 64).dequantize()[0, :32]).all()


# --- tiny models against the numpy reference ---------------------------------------------------


@pytest.mark.parametrize("qtype", NEW_TYPES)
def test_linear_weights_match_reference(tmp_path: Path, qtype: str) -> None:
    c = Converted(tmp_path, EXACT, qtype=qtype, **dims(qtype))
    ids = c.prompt()
    want = reference_logits(c, ids)
    assert_matches_reference(c.logits(ids), want)
    # One token at a time: the step branch, on int8 levels where the blocks are 32 wide.
    assert_matches_reference(c.step_logits(ids), want, STEP_TOLERANCE)


@pytest.mark.parametrize("embed_qtype", [*NEW_TYPES, "Q4_K", "Q5_K", "Q4_1"])
def test_embedding_and_tied_output_match_reference(tmp_path: Path, embed_qtype: str) -> None:
    c = Converted(tmp_path, EXACT, qtype="Q8_0", embed_qtype=embed_qtype, **dims(embed_qtype))
    ids = c.prompt()
    assert_matches_reference(c.logits(ids), reference_logits(c, ids))
    # The table stays quantized: GatherBlockQuantized, no float copy of it in the graph.
    graph = onnx.load(str(c.folder / "model.onnx"), load_external_data=False).graph
    assert "GatherBlockQuantized" in {n.op_type for n in all_nodes(graph)}
    assert "embed.table" not in {t.name for t in graph.initializer}


@pytest.mark.parametrize("qtype", ["Q5_0", "Q2_K", "IQ4_NL"])
def test_untied_output_matches_reference(tmp_path: Path, qtype: str) -> None:
    c = Converted(tmp_path, EXACT, qtype="Q4_0", embed_qtype=qtype, tied=False, **dims(qtype))
    assert not c.spec.tied_embeddings
    ids = c.prompt()
    assert_matches_reference(c.logits(ids), reference_logits(c, ids))


# What llama.cpp's presets write for a small model. Rows of 320 are not a multiple of 256, so
# (as for SmolLM2's 576 or Gemma 3 270M's 640) K-quants there fall back to Q5_0 / Q5_1 / Q8_0 /
# IQ4_NL; rows of 512 (ffn_down's input) keep the K-quant. Norms are F32.
SMALL = {"hidden": 320, "n_heads": 4, "n_kv_heads": 2, "ffn": 512}
PRESETS: dict[str, dict[str, Any]] = {
    "Q4_K_M": {
        "qtype": "Q5_0",
        "embed_qtype": "Q8_0",
        "tensor_types": {"attn_v": "Q8_0", "ffn_down": "Q6_K"},
        **SMALL,
    },
    "Q5_K_M": {
        "qtype": "Q5_1",
        "embed_qtype": "Q8_0",
        "tensor_types": {"attn_v": "Q8_0", "ffn_down": "Q6_K"},
        **SMALL,
    },
    "Q6_K": {"qtype": "Q8_0", "embed_qtype": "Q8_0", "tensor_types": {"ffn_down": "Q6_K"}, **SMALL},
    "IQ4_XS": {
        "qtype": "IQ4_NL",
        "embed_qtype": "Q8_0",
        "tensor_types": {"attn_v": "Q5_1", "ffn_down": "IQ4_XS"},
        "tied": False,
        **SMALL,
    },
    "Q3_K_M": {
        "qtype": "Q3_K",
        "embed_qtype": "Q3_K",
        "tensor_types": {
            "attn_v": "Q5_K",
            "attn_output": "Q4_K",
            "ffn_down": "Q4_K",
            "output": "Q6_K",
        },
        "tied": False,
        **K_DIMS,
    },
    "Q2_K": {
        "qtype": "Q2_K",
        "embed_qtype": "Q2_K",
        "tensor_types": {"attn_v": "Q3_K", "ffn_down": "Q3_K", "output": "Q6_K"},
        "tied": False,
        **K_DIMS,
    },
}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_preset_type_mixes_match_reference(tmp_path: Path, preset: str) -> None:
    c = Converted(tmp_path, EXACT, **PRESETS[preset])
    ids = c.prompt()
    assert_matches_reference(c.logits(ids), reference_logits(c, ids))


# --- 8-bit weights as two 4-bit halves (the fast float path) ----------------------------------

EIGHT_BIT = ("Q8_0", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS")


def any_blocks(qtype: str, rows: int, cols: int) -> np.ndarray:
    if qtype == "Q8_0":
        w = np.random.default_rng(3).normal(0.0, 0.3, size=(rows, cols)).astype(np.float32)
        return gguf.quants.quantize(w, QType.Q8_0)
    return random_blocks(qtype, rows, cols, 3)


@pytest.mark.parametrize("qtype", EIGHT_BIT)
def test_two_nibbles_hold_the_same_weights(qtype: str) -> None:
    rows, cols = 16, 512
    w = weight(qtype, any_blocks(qtype, rows, cols), rows, cols)
    assert w.bits == 8
    split = two_nibbles(w)
    assert split is not None
    assert (split.bits, split.n, split.k, split.mins) == (4, rows, 2 * cols, None)
    halves = split.dequantize()
    # Bit for bit: x @ W = [x, x] @ [low half | high half] (block minimums stay apart).
    without_mins = replace(w, mins=None).dequantize()
    np.testing.assert_array_equal(halves[:, :cols] + halves[:, cols:], without_mins)


def test_two_nibbles_leave_4_bit_weights_alone() -> None:
    assert two_nibbles(weight("Q3_K", random_blocks("Q3_K", 4, 256), 4, 256)) is None


def matmul_bits(folder: Path) -> list[int]:
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    return [
        next(a.i for a in n.attribute if a.name == "bits")
        for n in all_nodes(graph)
        if n.op_type == "MatMulNBits"
    ]


def load_graph(folder: Path) -> onnx.GraphProto:
    return onnx.load(str(folder / "model.onnx"), load_external_data=False).graph


def onnx_weight_bytes(folder: Path) -> int:
    """Every initializer's bytes, as stored (each once)."""
    model = onnx.load(str(folder / "model.onnx"))
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def matmul_kinds(folder: Path) -> set[tuple[int, ...]]:
    """(bits, block_size, accuracy_level) of every MatMulNBits."""
    graph = onnx.load(str(folder / "model.onnx"), load_external_data=False).graph
    keys = ("bits", "block_size", "accuracy_level")
    return {
        tuple(next(a.i for a in n.attribute if a.name == key) for key in keys)
        for n in all_nodes(graph)
        if n.op_type == "MatMulNBits"
    }


def test_eight_bit_layers_get_a_fast_kernel_with_float_activations(tmp_path: Path) -> None:
    head = Converted(tmp_path, ConvertOptions(int8_levels="head"), **PRESETS["Q4_K_M"])
    # In the layers, 8-bit blocks (Q5_0/Q8_0's 32, Q6_K's 16) run as 4-bit halves on the
    # float kernel (nibble_split.py); the Q8_0 head on exact int8 levels (int8_levels.py).
    assert matmul_kinds(head.folder) == {(8, 32, 4), (4, 32, 0), (4, 16, 0)}
    every = convert_gguf(head.gguf, tmp_path / "levels", ConvertOptions(int8_levels="all"))
    # With the layers on int8 levels too, every 8-bit block (32, and Q6_K's 16) goes to the
    # int8 kernel.
    assert matmul_kinds(every) == {(8, 32, 4), (8, 16, 4)}
    # The default: steps on the int8 kernel (step_split.py); prompts dequantize the same 8-bit
    # codes at run time (prompt_dequant.py) instead of storing them again as 4-bit halves.
    default = convert_gguf(head.gguf, tmp_path / "default", EXACT)
    assert matmul_kinds(default) == matmul_kinds(every)
    assert "FusedMatMul" in {n.op_type for n in all_nodes(load_graph(default))}
    stored = onnx_weight_bytes(default)
    assert stored <= 1.01 * onnx_weight_bytes(every) < 1.01 * onnx_weight_bytes(head.folder)
    int8 = convert_gguf(head.gguf, tmp_path / "int8", ConvertOptions(accuracy_level=4))
    assert 8 in matmul_bits(int8)  # int8 activations have a fast 8-bit kernel: kept


# --- every family in the block formats small models get ---------------------------------------


@pytest.mark.parametrize(("qtype", "embed_qtype"), [("Q5_0", "Q8_0"), ("IQ4_NL", "Q5_1")])
@pytest.mark.parametrize("family", list(TINY_FAMILIES))
def test_families_in_new_types_match_reference(
    tmp_path: Path, family: str, qtype: str, embed_qtype: str
) -> None:
    gguf_path = write_family_gguf(tmp_path / "m.gguf", family, qtype=qtype, embed_qtype=embed_qtype)
    folder = convert_gguf(gguf_path, tmp_path / "model", EXACT)
    ids = prompt(24)
    assert_matches(full_pass(folder, ids), ReferenceModel(gguf_path).logits(ids), family)
