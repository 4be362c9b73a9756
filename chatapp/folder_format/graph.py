"""Graph nodes the converter names so that a session can find them again, walking a graph, and
the check that a native graph's nodes agree with their weights.

The converter builds (convert/decoder_graph.py, step_split.py, int8_levels.py, native_graph.py)
and the engine reads (model_description.py, model_folder/, devices.py) by these
names.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import onnx

# The custom operators of chatapp's native GGUF kernels (native/, convert/gguf_blocks.py).
NATIVE_DOMAIN = "chatapp.gguf"
# Formats the library has kernels for: (weights per block, bytes per block). The converter
# writes them, a session checks a graph's nodes against them at load (`native_node_problem`).
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
# The native operators and which of their inputs is the weight.
_WEIGHT_INPUT = {"GgufMatMul": 1, "GgufGather": 0}
# The native attention of decode steps (convert/attention.py): no weight; its head counts.
DECODE_ATTENTION = "DecodeAttention"
_MAX_GROUP = 64  # query heads to a KV head the kernel takes
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


def native_node_problem(model: Path) -> str | None:
    """Why a native node of the graph at `model` disagrees with its weight, naming the node (an
    edited or damaged folder: the kernel would refuse it at the first answer); None when none
    does. Reads the graph, not its weights, once per version of the file."""
    st = model.stat()
    return _native_node_problem(str(model), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=32)
def _native_node_problem(path: str, mtime_ns: int, size: int) -> str | None:
    """Why a native node of the graph at `path` disagrees with its weight (None: none does).
    `mtime_ns` and `size` are the cache key: a rewritten file is read again."""
    del mtime_ns, size
    graph = onnx.load(path, load_external_data=False).graph
    weights = {t.name: t for t in graph.initializer}
    for node in all_nodes(graph):
        if node.domain != NATIVE_DOMAIN:
            continue
        problem = _node_problem(node, weights)
        if problem is not None:
            return f"node '{node.name or node.op_type}' ({node.op_type}) {problem}"
    return None


def _attention_problem(node: onnx.NodeProto) -> str | None:
    attrs = {a.name: a for a in node.attribute}
    missing = [
        n
        for n in ("num_heads", "kv_num_heads", "scale", "softcap", "local_window_size")
        if n not in attrs
    ]
    if missing:
        return f"lacks its attribute {missing[0]}"
    heads, kv_heads = attrs["num_heads"].i, attrs["kv_num_heads"].i
    if heads <= 0 or kv_heads <= 0 or heads % kv_heads or heads // kv_heads > _MAX_GROUP:
        return (
            f"has {heads} query heads for {kv_heads} KV heads: they must be a positive multiple "
            f"of them, at most {_MAX_GROUP} to one"
        )
    if len(node.input) not in (9, 11) or len(node.output) != 3:
        return "does not take GroupQueryAttention's 9 inputs (11 with LongRoPE) and 3 outputs"
    return None


def _node_problem(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> str | None:
    if node.op_type == DECODE_ATTENTION:
        return _attention_problem(node)
    if node.op_type not in _WEIGHT_INPUT:
        return "is not an operator of chatapp's GGUF kernels"
    attrs = {a.name: a for a in node.attribute}
    qtype_attr, k_attr, n_attr = attrs.get("qtype"), attrs.get("K"), attrs.get("N")
    if qtype_attr is None or k_attr is None or n_attr is None:
        return "lacks one of its attributes qtype, K and N"
    qtype = qtype_attr.s.decode("utf-8", "replace")
    k, n = k_attr.i, n_attr.i
    if qtype not in NATIVE_FORMATS:
        return f"names the format '{qtype[:20]}', which the kernels do not read"
    values, block_bytes = NATIVE_FORMATS[qtype]
    if k <= 0 or n <= 0 or k % values:
        return f"has K={k}, N={n}: K must be a positive multiple of {values} for {qtype}"
    index = _WEIGHT_INPUT[node.op_type]
    name = node.input[index] if len(node.input) > index else ""
    weight = weights.get(name)
    if weight is None:
        return f"takes its weight '{name[:80]}' from no initializer of the graph"
    row = k // values * block_bytes
    if weight.data_type != onnx.TensorProto.UINT8 or list(weight.dims) != [n, row]:
        try:
            kind = onnx.TensorProto.DataType.Name(weight.data_type).lower()
        except ValueError:
            kind = f"type {weight.data_type}"
        return (
            f"says {qtype} with K={k}, N={n} (uint8 [{n}, {row}]) but its weight is "
            f"{kind} {list(weight.dims)[:4]}"
        )
    stored = _stored_bytes(weight)
    if stored is not None and stored != n * row:
        return f"has a weight of {n * row} bytes, but the folder holds {stored} for it"
    return None


def _stored_bytes(weight: onnx.TensorProto) -> int | None:
    """The bytes the folder holds for `weight` (None: not known without reading them)."""
    if weight.data_location == onnx.TensorProto.EXTERNAL:
        entry = {e.key: e.value for e in weight.external_data}
        length = entry.get("length")
        return int(length) if length is not None and length.isdigit() else None
    if weight.HasField("raw_data"):
        return len(weight.raw_data)
    return len(weight.int32_data)  # uint8 stored as one int32 each


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


def float_kernel_graph(graph: onnx.ModelProto) -> bytes | None:
    """A copy of `graph` (read without its weights) with its level nodes on accuracy_level 0
    and its step/prompt If replaced by the prompt branch; None when it has neither.

    Only ONNX Runtime's CPU kernel quantizes activations in blocks of 32 as the levels assume;
    WebGPU's int8 (DP4A) path uses its own blocks, so there the three rows would be rounded
    again (max |logit diff| 0.38 measured). On float kernels the rows still sum to x.
    Weights in an external file stay there: a session on the copy is told the model's folder
    (engine/devices.py). The folder read for a device makes it (model_description.py).
    """
    model = onnx.ModelProto()
    model.CopyFrom(graph)  # the read graph stays as it is (its nodes are described)
    found = inline_prompt_branch(model)
    for node in model.graph.node:
        if levels_projection(node):
            for attr in node.attribute:
                if attr.name == "accuracy_level":
                    attr.i, found = 0, True
    return model.SerializeToString() if found else None
