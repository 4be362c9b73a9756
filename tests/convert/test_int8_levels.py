"""Float activations split into int8 levels: MatMulNBits' int8 kernel, float32-exact results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

from chatapp.convert.int8_levels import (
    LEVELS,
    blocked,
    level_rows,
    levels_product,
    nbits_inputs,
)
from chatapp.convert.onnx_graph import MS_DOMAIN, OnnxGraph
from chatapp.convert.weights import NBitsWeight, to_weight
from chatapp.folder_format.graph import all_nodes, float_kernel_graph
from tests.convert.test_weights import quantized, tensor

ROWS, COLS = 48, 160


def activations(rng: np.random.Generator, cols: int = COLS) -> np.ndarray:
    """[1, 5, K] with what real layers produce: outliers, tiny blocks, an all-zero block."""
    x = rng.normal(0.0, 1.0, size=(1, 5, cols)).astype(np.float32)
    x[0, 1, 7] = 300.0  # one outlier dominates its block's int8 step
    x[0, 2, 32:64] *= np.float32(1e-6)
    x[0, 3, 64:96] = 0.0
    return x


def run_linear(w: NBitsWeight, x: np.ndarray, levels: bool) -> np.ndarray:
    g = OnnxGraph()
    name = g.add_input("x", TensorProto.FLOAT, [1, "S", w.k])
    if levels:
        y = levels_product(g, level_rows(g, blocked(g, name, w), LEVELS), w, "w")
    else:  # the kernel's own int8 rounding of the activations (--accuracy-level 4)
        y = g.op1(
            "MatMulNBits",
            nbits_inputs(g, name, "w", w),
            domain=MS_DOMAIN,
            K=w.k,
            N=w.n,
            bits=w.bits,
            block_size=w.block_size,
            accuracy_level=4,
        )
    g.op("Identity", [y], ["y"])
    g.add_output("y", TensorProto.FLOAT, [1, "S", w.n])
    session = ort.InferenceSession(g.model("linear", {}).SerializeToString())
    return np.asarray(session.run(["y"], {"x": x})[0])


# Q6_K: 8-bit codes in blocks of 16, where the kernel rounds activations per 16 as well.
@pytest.mark.parametrize(
    ("qtype", "cols"), [("Q4_0", COLS), ("Q4_1", COLS), ("Q8_0", COLS), ("Q6_K", 256)]
)
def test_int8_levels_match_float_math_where_plain_int8_does_not(qtype: str, cols: int) -> None:
    w = to_weight(tensor(qtype, quantized(qtype, ROWS, cols), ROWS, cols))
    assert isinstance(w, NBitsWeight)
    without_mins = NBitsWeight(w.bits, w.block_size, w.packed, w.scales, w.zero_points, None)
    dense = without_mins.dequantize().astype(np.float64)
    x = activations(np.random.default_rng(1), cols)
    exact = x.astype(np.float64) @ dense.T
    # Per output: the size of the terms summed, so tiny rows are judged on their own scale.
    scale = np.abs(x.astype(np.float64)) @ np.abs(dense).T
    levels_err = np.abs(run_linear(without_mins, x, levels=True) - exact) / scale
    plain_err = np.abs(run_linear(without_mins, x, levels=False) - exact) / scale
    assert levels_err.max() < 5e-6  # float32 accumulation: 3e-7 here
    assert plain_err.max() > 1000 * levels_err.max()
    assert np.all(run_linear(without_mins, np.zeros_like(x), levels=True) == 0.0)


def test_device_copy_puts_level_nodes_on_the_float_kernel(tmp_path: Path) -> None:
    w = to_weight(tensor("Q8_0", quantized("Q8_0", ROWS, COLS), ROWS, COLS))
    assert isinstance(w, NBitsWeight)
    g = OnnxGraph()
    name = g.add_input("x", TensorProto.FLOAT, [1, "S", w.k])
    g.op("Identity", [levels_product(g, level_rows(g, blocked(g, name, w), LEVELS), w, "w")], ["y"])
    g.add_output("y", TensorProto.FLOAT, [1, "S", w.n])
    path = tmp_path / "model.onnx"
    onnx.save(g.model("linear", {}), str(path))
    copy = float_kernel_graph(onnx.load(path, load_external_data=False))
    assert copy is not None
    levels = [n for n in all_nodes(onnx.load_from_string(copy).graph) if n.op_type == "MatMulNBits"]
    assert [a.i for n in levels for a in n.attribute if a.name == "accuracy_level"] == [0]
    x = activations(np.random.default_rng(2))
    on_float = ort.InferenceSession(copy).run(["y"], {"x": x})[0]
    np.testing.assert_allclose(on_float, run_linear(w, x, levels=True), rtol=1e-5, atol=1e-4)
    plain = OnnxGraph()
    plain.op("Identity", [plain.add_input("x", TensorProto.FLOAT, [1])], ["y"])
    plain.add_output("y", TensorProto.FLOAT, [1])
    onnx.save(plain.model("plain", {}), str(path))
    assert float_kernel_graph(onnx.load(path, load_external_data=False)) is None
