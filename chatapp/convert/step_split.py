"""One graph, two ways through the layers: single-token steps and prompts.

The exact int8 levels (int8_levels.py) make a decode step's projections ~1.6x faster, but a
prompt's rows are compute-bound there (levels x tokens int8 rows), and the float kernel is the
faster one for them. So the layers are built twice under one If on the number of new tokens:
the `then` branch (one token) with levels, the `else` branch (a prompt) on the float kernel.
Both branches read the same initializers from the outer graph (ONNX Runtime packs each node's
weights for its own kernel); the embedding and the output projection are outside, built once.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from chatapp.convert.onnx_graph import OnnxGraph

NODE_NAME = "layers/step_or_prompt"


def single_token(g: OnnxGraph, ids: str) -> str:
    """A one-element bool: whether this run feeds exactly one new token per sequence."""
    length = g.op1("Shape", [ids], start=1, end=2)
    return g.op1("Equal", [length, g.const("one_1d", np.array([1], np.int64))])


def branch(nodes: list[onnx.NodeProto], name: str, outputs: list[str]) -> onnx.GraphProto:
    """A subgraph body: no inputs of its own (it reads the outer scope), typed outputs left to
    shape inference."""
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    return helper.make_graph(nodes, name, [], outs)


def inline_prompt_branch(model: onnx.ModelProto) -> bool:
    """Replace the step/prompt If with its prompt branch (in place); False when the model has
    none.

    Device sessions use this: an If runs on the CPU in most providers, which would move every
    layer's KV cache through the host at each step; the prompt branch serves steps too."""
    graph = model.graph
    for index, node in enumerate(graph.node):
        if node.op_type == "If" and node.name == NODE_NAME:
            body = next(a.g for a in node.attribute if a.name == "else_branch")
            rename = {o.name: outer for o, outer in zip(body.output, node.output, strict=True)}
            inlined = []
            for inner in body.node:
                copy = onnx.NodeProto()
                copy.CopyFrom(inner)
                copy.input[:] = [rename.get(i, i) for i in inner.input]
                copy.output[:] = [rename.get(o, o) for o in inner.output]
                inlined.append(copy)
            del graph.node[index]
            for offset, inner in enumerate(inlined):
                graph.node.insert(index + offset, inner)
            return True
    return False
