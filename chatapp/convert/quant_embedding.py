"""The token embedding as a graph node: rows gathered straight from the quantized table.

Every block format the converter reads becomes GatherBlockQuantized (4- or 8-bit cells, zero
points when the format has them); formats with an additive block minimum (Q4_1, Q5_1, Q2_K,
Q4_K, Q5_K) gather their minimums beside the codes and add them per block, in the same order of
operations as NBitsWeight.dequantize(), so the rows are exact and the table stays compact.
Float tables are gathered as they are (float16 above LARGE_TABLE elements, as before).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from chatapp.convert.onnx_graph import MS_DOMAIN, OnnxGraph
from chatapp.convert.weights import NBitsWeight, Weight

# Float tables above this many elements are stored as float16 (exact for F16 sources).
LARGE_TABLE = 64 * 1024 * 1024


def embed_tokens(g: OnnxGraph, ids: str, w: Weight) -> str:
    """float32 [B, S, hidden] rows of `w` for the token ids in `ids`."""
    if isinstance(w, NBitsWeight) and w.bits in (4, 8):
        return _quantized_rows(g, ids, w)
    return _float_rows(g, ids, w)


def _quantized_rows(g: OnnxGraph, ids: str, w: NBitsWeight) -> str:
    inputs = [g.const("embed.qweight", w.packed.reshape(w.n, -1)), ids]
    inputs.append(g.const("embed.scales", w.scales))
    zp = w.packed_zero_points()
    if zp is not None:
        inputs.append(g.const("embed.zero_points", zp))
    rows = g.op1(
        "GatherBlockQuantized",
        inputs,
        domain=MS_DOMAIN,
        bits=w.bits,
        block_size=w.block_size,
        gather_axis=0,
        quantize_axis=1,
    )
    if w.mins is None:
        return rows
    blocks = w.k // w.block_size
    by_block = g.const("embed.block_shape", np.array([0, 0, blocks, w.block_size], np.int64))
    mins = g.op1("Gather", [g.const("embed.block_mins", w.mins), ids])  # [B, S, blocks]
    mins = g.op1("Unsqueeze", [mins, g.const("axis_last", np.array([-1], np.int64))])
    shifted = g.op1("Add", [g.op1("Reshape", [rows, by_block]), mins])
    return g.op1("Reshape", [shifted, g.const("embed.row_shape", np.array([0, 0, w.k], np.int64))])


def _float_rows(g: OnnxGraph, ids: str, w: Weight) -> str:
    table = w.dequantize()
    if table.size > LARGE_TABLE:
        gathered = g.op1("Gather", [g.const("embed.table", table.astype(np.float16)), ids])
        return g.op1("Cast", [gathered], to=TensorProto.FLOAT)
    return g.op1("Gather", [g.const("embed.table", table), ids])
