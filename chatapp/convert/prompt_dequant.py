"""Prompts through 8-bit weights without a second copy of them: dequantized at run time.

In a graph split into a step way and a prompt way (step_split.py), decode steps run 8-bit
weights on MatMulNBits' int8 kernel through exact levels (int8_levels.py). Prompts used to run
them as two 4-bit halves (nibble_split.py), a second copy of every code: the folder stored each
8-bit matrix twice. Here the prompt way reads the step's own initializers (codes, scales, zero
points: the graph stores equal constants once) and builds w = scale * (q - zero_point) per block
at run time, then one float MatMul. Each product is an f16-derived scale times a code below 256,
exact in float32, so the weights are the step's bit for bit. On a prompt of 8-512 tokens this
ran 1.3-2.2x faster than the halves (2048 x 5632, 2 threads, docs/converter.md); a run-time
reshape keeps ONNX Runtime from folding the float copy into the session at load.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from chatapp.convert.onnx_graph import MS_DOMAIN, OnnxGraph
from chatapp.convert.weights import NBitsWeight


def dequantized_matmul(g: OnnxGraph, x: str, w: NBitsWeight, name: str) -> str:
    """x @ (scale * (q - zero_point))^T for an 8-bit `w`, block minimums left to the caller."""
    assert w.bits == 8  # 4-bit cells would need unpacking; those run on MatMulNBits directly
    blocks = w.k // w.block_size
    # 1, but only known when the graph runs: (S + 1) - S of x's sequence length.
    length = g.op1("Shape", [x], start=1, end=2)
    one = g.op1("Sub", [g.op1("Add", [length, g.const("one_1d", np.array([1], np.int64))]), length])

    def at_run_time(initializer: str, shape: list[int]) -> str:
        target = g.const(f"{name}.dequant_shape", np.array(shape, np.int64))
        return g.op1("Reshape", [initializer, g.op1("Mul", [target, one])])

    codes = at_run_time(g.const(f"{name}.qweight", w.packed), [w.n, blocks, w.block_size])
    scales = at_run_time(g.const(f"{name}.scales", w.scales), [w.n, blocks, 1])
    zp = w.packed_zero_points()  # the step's tensor when it has one (8-bit: one per block)
    if zp is None:
        zero = g.const("zero_point_128", np.array(w.default_zero_point, np.float32))
    else:
        zero = g.op1(
            "Cast",
            [at_run_time(g.const(f"{name}.zero_points", zp), [w.n, blocks, 1])],
            to=TensorProto.FLOAT,
        )
    centred = g.op1("Sub", [g.op1("Cast", [codes], to=TensorProto.FLOAT), zero])
    weight = g.op1(
        "Reshape",
        [
            g.op1("Mul", [centred, scales]),
            g.const(f"{name}.matrix", np.array([w.n, w.k], np.int64)),
        ],
    )
    return g.op1("FusedMatMul", [x, weight], domain=MS_DOMAIN, transB=1)
