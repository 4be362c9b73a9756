"""Float activations through MatMulNBits' fast int8 kernel, exact to float32 rounding.

With float activations (accuracy_level 0) ONNX Runtime's MatMulNBits dequantizes every block to
float32 and runs 2-5x slower than with accuracy_level 4, which quantizes each block of 32
activations to int8 (scale = max|block| / 127) and multiplies integers. That rounding is what
made `--accuracy-level 4` disagree with exact math. Here the graph splits x itself into three
int8 levels per block, x = c1 + c2 + r with c1 = round(x / s1) s1, c2 the same of x - c1, and
feeds them as three rows (M = 3) of one MatMulNBits with accuracy_level 4, summing the outputs:
- c1 and c2 are already on the int8 grid the kernel picks (their largest element is +-127 steps),
  so the kernel's quantization returns them unchanged;
- only r, about max|x| / 127^2 / 2 at most, is rounded by the kernel, an error of about
  max|x| / 127^3 / 4 (5e-7 of the block's largest activation), float32 rounding's order.
The weights are read once for the three rows (docs/converter.md: decode steps about 1.4x faster
on the default model, max |logit diff| from the numpy reference 1e-4, as with float activations).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from chatapp.convert.onnx_graph import MS_DOMAIN, OnnxGraph
from chatapp.convert.weights import NBitsWeight
from chatapp.folder_format.graph import LEVELS_NODE_SUFFIX

LEVELS = 3
# Decode steps (step_split.py): two levels, x = c1 + r with the kernel rounding r, an error of
# at most max|x| / 127^2 / 4 per block (1.6e-5 of its largest activation); 1.6x faster steps
# than the float kernel against 1.3x with three (docs/converter.md has the agreement figures).
STEP_LEVELS = 2
# The kernel quantizes activations in blocks of the weight's block size, so the levels are cut
# in those blocks: 32 (Q4/Q5/Q8/IQ4 formats) and, for 8-bit weights, Q6_K's 16 (checked in
# tests/convert/test_int8_levels.py; 4-bit cells of 16, Q2_K/Q3_K, keep the float path).
BLOCKS = {4: (32,), 8: (16, 32)}


def int8_levels_apply(w: NBitsWeight) -> bool:
    return w.block_size in BLOCKS.get(w.bits, ())


def blocked(g: OnnxGraph, x: str, w: NBitsWeight) -> str:
    """x [B, S, K] as [1, B, S, K / block, block]: the leading axis is where the levels stack."""
    first = g.const("axis_first", np.array([0], np.int64))
    shape = np.array([0, 0, 0, w.k // w.block_size, w.block_size], dtype=np.int64)
    return g.op1(
        "Reshape",
        [g.op1("Unsqueeze", [x, first]), g.const(f"block_shape_{w.block_size}", shape)],
    )


def block_sums(g: OnnxGraph, xb: str) -> str:
    """sum(x in each block) [B, S, K / block] of `blocked` x."""
    axes = g.const("axes_first_last", np.array([0, -1], np.int64))
    return g.op1("ReduceSum", [xb, axes], keepdims=0)


def level_rows(g: OnnxGraph, xb: str, levels: int) -> str:
    """`blocked` x as `levels` rows that sum to it, stacked: [levels, B, S, K / block, block]."""
    return g.op1("Concat", level_rows_list(g, xb, levels), axis=0)


def level_rows_list(g: OnnxGraph, xb: str, levels: int) -> list[str]:
    """The rows of `level_rows`, each [1, B, S, K / block, block]."""
    last = g.const("axis_last", np.array([-1], np.int64))
    int8_max = g.const("int8_max", np.array(127, np.float32))
    # An all-zero block would divide 0 by 0; any positive step gives its zeros back.
    tiny = g.const("tiny_step", np.array(1e-30, np.float32))
    rows, rest = [], xb
    for _ in range(levels - 1):
        step = g.op1(
            "Div", [g.op1("ReduceMax", [g.op1("Abs", [rest]), last], keepdims=1), int8_max]
        )
        step = g.op1("Max", [step, tiny])
        coarse = g.op1("Mul", [g.op1("Round", [g.op1("Div", [rest, step])]), step])
        rest = g.op1("Sub", [rest, coarse])
        rows.append(coarse)
    return [*rows, rest]


def level_rows_by_run(g: OnnxGraph, xb: str, fewer: int, single_token: str) -> str:
    """`fewer` rows of `blocked` x in one-token runs, `fewer` + 1 otherwise (exact prompt logits
    for the output projection, a cheaper step). Chosen with arithmetic and a Slice rather than an
    If: the rows of the longer split, [c1 .. ck, r], with s = 1 for a step become
    [c1 .. ck + s r, (1 - s) r] cut to k + 1 - s rows; ck + r is the shorter split's last row."""
    rows = level_rows_list(g, xb, fewer + 1)
    step = g.op1("Cast", [single_token], to=TensorProto.FLOAT)
    moved = g.op1("Mul", [rows[-1], step])
    rows[-2:] = [g.op1("Add", [rows[-2], moved]), g.op1("Sub", [rows[-1], moved])]
    count = g.op1(
        "Sub",
        [
            g.const(f"rows_{fewer + 1}", np.array([fewer + 1], np.int64)),
            g.op1("Cast", [single_token], to=TensorProto.INT64),
        ],
    )
    zero = g.const("zero_1d", np.array([0], np.int64))
    stacked = g.op1("Concat", rows, axis=0)
    return g.op1("Slice", [stacked, zero, count, g.const("axis_first", np.array([0], np.int64))])


def levels_product(g: OnnxGraph, rows: str, w: NBitsWeight, name: str) -> str:
    """The sum over `level_rows` (any number of them) of row @ (scale * (q - zp))^T."""
    merge = g.const("levels_shape", np.array([0, 0, 0, w.k], np.int64))
    inputs = nbits_inputs(g, g.op1("Reshape", [rows, merge]), name, w)
    y = g.op(
        "MatMulNBits",
        inputs,
        1,
        MS_DOMAIN,
        name=f"{name}{LEVELS_NODE_SUFFIX}",
        K=w.k,
        N=w.n,
        bits=w.bits,
        block_size=w.block_size,
        accuracy_level=4,
    )[0]
    first = g.const("axis_first", np.array([0], np.int64))
    return g.op1("ReduceSum", [y, first], keepdims=0)


def nbits_inputs(g: OnnxGraph, x: str, name: str, w: NBitsWeight) -> list[str]:
    """MatMulNBits' inputs: the activations, then the weight's blocks, scales and (when it has
    them) zero points as initializers named after the projection."""
    inputs = [x, g.const(f"{name}.qweight", w.packed), g.const(f"{name}.scales", w.scales)]
    zp = w.packed_zero_points()
    if zp is not None:
        inputs.append(g.const(f"{name}.zero_points", zp))
    return inputs
