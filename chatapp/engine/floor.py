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

# Ops whose first input is a table read one row per token.
_GATHERS = {"Gather", "GatherBlockQuantized", "GgufGather"}


def _tensor_bytes(tensor: onnx.TensorProto) -> int:
    if uses_external_data(tensor):
        info = {e.key: e.value for e in tensor.external_data}
        return int(info.get("length", 0))
    if tensor.raw_data:
        return len(tensor.raw_data)
    elem = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    return int(np.prod(tensor.dims, dtype=np.int64)) * np.dtype(elem).itemsize


def onnx_weight_bytes_per_step(model_path: Path) -> int:
    """Initializer bytes one decode step reads: all of them, one row of gathered tables."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    sizes = {t.name: _tensor_bytes(t) for t in graph.initializer}
    rows = {t.name: (t.dims[0] if t.dims else 1) for t in graph.initializer}
    gathered = {n.input[0] for n in graph.node if n.op_type in _GATHERS and n.input}
    gathered -= {  # a table a projection also reads (native tied head): read whole
        i for n in graph.node if n.op_type not in _GATHERS for i in n.input
    }
    total = 0
    for name, size in sizes.items():
        total += size // max(1, rows[name]) if name in gathered else size
    return total


def gguf_weight_bytes_per_step(path: Path) -> int:
    """A GGUF's tensor bytes one step reads (llama.cpp reads the file's own encodings)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    names = {t.name for t in reader.tensors}
    total = 0
    for t in reader.tensors:
        size = int(t.n_bytes)
        # With a separate output head, the embedding table is only gathered from.
        if t.name == "token_embd.weight" and "output.weight" in names:
            size //= max(1, int(t.shape[-1]))
        total += size
    return total


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
