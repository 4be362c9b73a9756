"""Graph nodes the converter names so that a session can find them again, and walking a graph.

The converter builds (convert/decoder_graph.py, step_split.py, int8_levels.py, native_graph.py)
and the engine reads (model_folder/, devices.py, native_kernels.py, memory.py) by these names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import onnx

# The custom operators of chatapp's native GGUF kernels (native/, convert/gguf_blocks.py).
NATIVE_DOMAIN = "chatapp.gguf"
# Formats the library has kernels for: (weights per block, bytes per block). The converter
# writes them, the engine checks a graph's nodes against them at load (native_kernels.py).
NATIVE_FORMATS: dict[str, tuple[int, int]] = {
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q8_0": (32, 34),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
    "IQ4_XS": (256, 136),
}
# The If that runs the layers with int8 levels for one new token and without for a prompt
# (convert/step_split.py).
STEP_OR_PROMPT_NODE = "layers/step_or_prompt"
# Names the MatMulNBits nodes fed with int8 levels (convert/int8_levels.py).
LEVELS_NODE_SUFFIX = "/int8_levels"


def declares_native(model: onnx.ModelProto) -> bool:
    """Whether the graph imports the native kernels' domain (its sessions need the library)."""
    return any(o.domain == NATIVE_DOMAIN for o in model.opset_import)


def all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """The graph's nodes and, after each, those of its subgraphs (an If's branches)."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)
            for sub in attr.graphs:
                yield from all_nodes(sub)


def levels_projection(node: onnx.NodeProto) -> str | None:
    """The projection a MatMulNBits node on int8 levels computes ("lm_head"); None for others."""
    if node.op_type != "MatMulNBits" or not node.name.endswith(LEVELS_NODE_SUFFIX):
        return None
    return node.name.removesuffix(LEVELS_NODE_SUFFIX)


def inline_prompt_branch(model: onnx.ModelProto) -> bool:
    """Replace the step/prompt If with its prompt branch (in place); False when the model has
    none.

    Device sessions use this: an If runs on the CPU in most providers, which would move every
    layer's KV cache through the host at each step; the prompt branch serves steps too."""
    graph = model.graph
    for index, node in enumerate(graph.node):
        if node.op_type == "If" and node.name == STEP_OR_PROMPT_NODE:
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


def float_kernel_copy(model_path: Path) -> bytes | None:
    """The model with its level nodes on accuracy_level 0 and its step/prompt If replaced by
    the prompt branch; None when it has neither.

    Only ONNX Runtime's CPU kernel quantizes activations in blocks of 32 as the levels assume;
    WebGPU's int8 (DP4A) path uses its own blocks, so there the three rows would be rounded
    again (max |logit diff| 0.38 measured). On float kernels the rows still sum to x.
    Weights in an external file stay there: a session on the copy is told the model's folder
    (engine/devices.py).
    """
    model = onnx.load(str(model_path), load_external_data=False)
    found = inline_prompt_branch(model)
    for node in model.graph.node:
        if levels_projection(node):
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.i, found = 0, True
    return model.SerializeToString() if found else None
