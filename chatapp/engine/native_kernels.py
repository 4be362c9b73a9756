"""chatapp's native GGUF kernels (native/, docs/converter.md "Native kernels") for ONNX Runtime.

A native graph (`chatapp convert --graph auto|native|both`) multiplies by raw GGUF blocks with the
custom operator `chatapp.gguf.GgufMatMul`; its sessions need the library registered, and run on
the CPU only (the operator has no device kernel, and running it on the host would move the KV
cache through it every step). Stock graphs never load the library. Which graph of a folder a
session takes: engine/model_folder/model.py (`native_preferred` below).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import onnx
import onnxruntime as ort

from chatapp.engine.errors import ModelError
from chatapp.folder_format.graph import NATIVE_DOMAIN, NATIVE_FORMATS, all_nodes, declares_native
from chatapp.folder_format.native_library import library_isa as library_isa
from chatapp.folder_format.native_library import library_path as library_path
from chatapp.folder_format.native_library import usable_isa

NOT_BUILT = "it needs chatapp's GGUF kernels, which are not built here (`make native`)"


class NativeKernelsUnavailable(ModelError):
    """A native-only folder where its kernels cannot run (not built, or not on this device)."""


class NativeNodeMismatch(ModelError):
    """A native node whose attributes disagree with its weight: the kernel would refuse it at
    the first answer, so the folder is refused at load."""


# The operators and which of their inputs is the weight.
_WEIGHT_INPUT = {"GgufMatMul": 1, "GgufGather": 0}


def native_preferred(on_cpu: bool) -> bool:
    """Whether a session should take a folder's native graph over its stock one: on the CPU,
    with the library here and its fast kernels (not the scalar fallback)."""
    return on_cpu and usable_isa() is not None


def kernels_label(native: bool) -> str:
    """Which kernels run a graph that is `native` or not, for the backend line ("GGUF
    kernels, AVX2")."""
    if not native:
        return "ONNX Runtime kernels"
    isa = library_isa()
    names = {"avx2": "AVX2", "avx512vnni": "AVX-512 VNNI", "scalar": "scalar"}
    return f"GGUF kernels, {names.get(isa or '', isa or 'not built')}"


@lru_cache(maxsize=32)
def _declares_native(path: str, mtime_ns: int, size: int) -> bool:
    del mtime_ns, size  # the cache key: a rewritten file is read again
    return declares_native(onnx.load(path, load_external_data=False))


def check_native_nodes(model: Path) -> None:
    """Refuse a graph whose native nodes disagree with their weights (an edited or damaged
    folder) with one sentence naming the node; reads the graph, not its weights."""
    st = model.stat()
    problem = _native_node_problem(str(model), st.st_mtime_ns, st.st_size)
    if problem is not None:
        raise NativeNodeMismatch(
            f"{model.name} of {model.parent.name} is damaged: {problem}; convert its GGUF again."
        )


@lru_cache(maxsize=32)
def _native_node_problem(path: str, mtime_ns: int, size: int) -> str | None:
    del mtime_ns, size  # the cache key: a rewritten file is read again
    graph = onnx.load(path, load_external_data=False).graph
    weights = {t.name: t for t in graph.initializer}
    for node in all_nodes(graph):
        if node.domain != NATIVE_DOMAIN:
            continue
        problem = _node_problem(node, weights)
        if problem is not None:
            return f"node '{node.name or node.op_type}' ({node.op_type}) {problem}"
    return None


def _node_problem(node: onnx.NodeProto, weights: dict[str, onnx.TensorProto]) -> str | None:
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


def needs_native(model: Path) -> bool:
    """Whether the graph at `model` uses the native kernels (reads the graph, not its weights)."""
    try:
        st = model.stat()
    except OSError:
        return False
    return _declares_native(str(model), st.st_mtime_ns, st.st_size)


def register_if_needed(
    model: Path | bytes, on_cpu: bool, device_label: str, opts: ort.SessionOptions
) -> None:
    """Register the library with `opts` when the graph needs it; refuse with a sentence the user
    can act on when it cannot run here."""
    if isinstance(model, bytes) or not needs_native(model):
        return
    if not on_cpu:
        raise NativeKernelsUnavailable(
            f"{model.parent.name} runs on chatapp's GGUF kernels, which run on the CPU only; to "
            f"run it on {device_label}, open its GGUF again with that device selected (or "
            "`chatapp convert --graph both`)."
        )
    path = library_path()
    if path is None:
        raise NativeKernelsUnavailable(
            f"{model.parent.name} needs chatapp's GGUF kernels, which are not built here; run "
            "`make native`, or convert the GGUF again with --graph stock."
        )
    check_native_nodes(model)
    opts.register_custom_ops_library(str(path))
