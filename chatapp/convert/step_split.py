"""One graph, two ways through the layers: single-token steps and prompts.

The exact int8 levels (int8_levels.py) make a decode step's projections ~1.6x faster, but a
prompt's rows are compute-bound there (levels x tokens int8 rows), and the float kernel is the
faster one for them. So the layers are built twice under one If on the number of new tokens:
the `then` branch (one token) with levels, the `else` branch (a prompt) on the float kernel.
The If is named `folder_format.graph.STEP_OR_PROMPT_NODE`; device sessions inline its prompt
branch (`inline_prompt_branch` there).
Both branches read the same initializers from the outer graph (ONNX Runtime packs each node's
weights for its own kernel); the embedding and the output projection are outside, built once.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from chatapp.convert.onnx_graph import OnnxGraph


def single_token(g: OnnxGraph, ids: str) -> str:
    """A one-element bool: whether this run feeds exactly one new token per sequence."""
    length = g.op1("Shape", [ids], start=1, end=2)
    return g.op1("Equal", [length, g.const("one_1d", np.array([1], np.int64))])


def branch(nodes: list[onnx.NodeProto], name: str, outputs: list[str]) -> onnx.GraphProto:
    """A subgraph body: no inputs of its own (it reads the outer scope), typed outputs left to
    shape inference."""
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    return helper.make_graph(nodes, name, [], outs)
