"""The physical floor of a decode step: bytes it must read, and how fast this machine reads.

A decode step reads every weight once (only one row of an embedding table) and the KV cache
of every token so far. Divided into the machine's measured read bandwidth that gives a ceiling
in tokens/s that no system on this machine can pass; the report prints each system's share.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
from onnx.external_data_helper import uses_external_data

# Ops that read one row per token of a table: which of their inputs are such tables
# (GatherBlockQuantized gathers its scales and zero points by row with the codes; the native
# GgufGather reads rows of the GGUF's own blocks; GroupQueryAttention reads the rows of its cos
# and sin caches at the tokens' positions: 67 MB for Gemma 3's 32k context, one row a step;
# so does the native DecodeAttention, which takes the same inputs).
_GATHERS = {
    "Gather": (0,),
    "GatherBlockQuantized": (0, 2, 3),
    "GgufGather": (0,),
    "GroupQueryAttention": (7, 8),
    "DecodeAttention": (7, 8),
}
# chatapp's step/prompt If (convert/step_split.py): a decode step runs only its `then` branch.
_STEP_SPLIT = ("layers/step_or_prompt", "then_branch")


def _tensor_bytes(tensor: onnx.TensorProto) -> int:
    if uses_external_data(tensor):
        info = {e.key: e.value for e in tensor.external_data}
        return int(info.get("length", 0))
    if tensor.raw_data:
        return len(tensor.raw_data)
    elem = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return int(np.prod(tensor.dims, dtype=np.int64)) * np.dtype(elem).itemsize


def _step_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes a one-token run can execute: every subgraph's, except the prompt branch of
    chatapp's step/prompt If."""
    nodes = []
    for node in graph.node:
        nodes.append(node)
        for attr in node.attribute:
            if attr.type != onnx.AttributeProto.GRAPH:
                continue
            if node.name == _STEP_SPLIT[0] and attr.name != _STEP_SPLIT[1]:
                continue
            nodes += _step_nodes(attr.g)
    return nodes


def onnx_step_bytes(model_path: Path) -> dict[str, int]:
    """Each initializer a decode step reads, by name, with the bytes it reads: all of it, one
    row of a gathered table (initializers only a prompt reads are left out)."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    nodes = _step_nodes(graph)
    rows_only: set[str] = set()  # read one row per token by every node that reads them
    whole: set[str] = set()
    for n in nodes:
        tables = _GATHERS.get(n.op_type, ())
        for i, name in enumerate(n.input):
            (rows_only if i in tables else whole).add(name)
    read = {}
    for t in graph.initializer:
        if t.name in whole:
            read[t.name] = _tensor_bytes(t)
        elif t.name in rows_only:
            read[t.name] = _tensor_bytes(t) // max(1, t.dims[0] if t.dims else 1)
    return read


def onnx_weight_bytes_per_step(model_path: Path) -> int:
    """Initializer bytes one decode step reads (`onnx_step_bytes`, summed)."""
    return sum(onnx_step_bytes(model_path).values())


def gguf_step_bytes(path: Path) -> dict[str, tuple[str, int]]:
    """Each GGUF tensor's (type name, bytes one step reads): llama.cpp reads the file's own
    encodings, all of every tensor but one row of an embedding table that is not the head."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    names = {t.name for t in reader.tensors}
    read = {}
    for t in reader.tensors:
        size = int(t.n_bytes)
        # With a separate output head, the embedding table is only gathered from.
        if t.name == "token_embd.weight" and "output.weight" in names:
            size //= max(1, int(t.shape[-1]))
        read[t.name] = (t.tensor_type.name, size)
    return read


def gguf_weight_bytes_per_step(path: Path) -> int:
    """A GGUF's tensor bytes one step reads (`gguf_step_bytes`, summed)."""
    return sum(size for _type, size in gguf_step_bytes(path).values())


def read_bandwidth(threads: int, megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes/s this machine reads with `threads` threads (best of `repeats`, memory-bound OR)."""
    data = np.ones(megabytes * 1024 * 1024 // 8, dtype=np.uint64)
    parts = np.array_split(data, max(1, threads))
    best = 0.0
    with ThreadPoolExecutor(len(parts)) as pool:
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(np.bitwise_or.reduce, parts))
            best = max(best, data.nbytes / (time.perf_counter() - start))
    return best


def ceiling_tokens_per_s(weight_bytes: int, kv_bytes: int, bandwidth: float) -> float:
    """The most tokens/s a step that reads `weight_bytes + kv_bytes` could reach."""
    return bandwidth / (weight_bytes + kv_bytes) if weight_bytes + kv_bytes else 0.0
