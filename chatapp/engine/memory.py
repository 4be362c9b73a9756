"""What a model will hold in memory while it answers, what this computer has free, and the
refusal when the first does not fit in the second. No Qt.

The estimate is made from the folder as read once (model_description.read_model), before
anything is loaded: the weights once (the graph and its external data), plus ONNX Runtime's
pre-packed copies of the matrix weights (MatMulNBits and MatMul with a constant right-hand side:
each node packs its own copy for its kernel, and a converter-version-6+ graph runs two kernels
on the same weights, one for prompts and one for decode steps), minus the originals those
copies replace, plus the KV cache at the engine's context (allocated up front by the IO-Binding
loop and refused beyond half of the memory: `check_kv_memory`), the tokenizer (from the size of
its tokenizer.json) and a fixed allowance for the runtime and a prompt's activations.
docs/engine.md, "Memory while answering", compares it with measured peaks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path

import onnx

from chatapp.engine.errors import EngineError, ModelError
from chatapp.engine.model_folder.model import FolderRead, ModelInfo
from chatapp.folder_format.graph import all_nodes
from chatapp.system_memory import available_memory, physical_memory
from chatapp.units import fmt_bytes, whole_mb_up

# Python, ONNX Runtime's libraries and arena, a 512-token prompt piece's activations: about
# 150-200 MB measured with the default model (docs/engine.md).
RUNTIME_OVERHEAD = 200_000_000
# What a loaded tokenizer keeps per byte of its tokenizer.json, measured: 3.7x for the default
# model's 3.5 MB (13 MiB), 3.1x for Gemma 3's 33 MB (99 MiB).
TOKENIZER_PER_JSON_BYTE = 4
INT8_KERNEL = 4  # MatMulNBits accuracy_level whose packing adds block scales and block sums
# IO-Binding allocates KV for the whole context up front; cap it so a 128k-context model
# does not reserve gigabytes for a chat that will use a few thousand tokens.
DEFAULT_MAX_CONTEXT = 8192


class MemoryRefusal(ModelError):
    """The model would need more memory than is free: refused before loading it."""


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a loaded model holds while answering, by what holds them."""

    weights: int  # the folder's graph and external data, the part no packed copy replaces
    packed: int  # ONNX Runtime's pre-packed copies (heap)
    # Of those, what is resident at once when they are mapped and released around prompts
    # (packed_cache.py): one kernel's copies of the layers, and the float matrices'.
    packed_one_kernel: int
    kv: int  # the KV cache for `context` tokens
    context: int
    mapped_files: tuple[Path, ...] = ()  # the external data files ONNX Runtime maps
    overhead: int = RUNTIME_OVERHEAD
    tokenizer: int = 0  # what the tokenizer keeps (TOKENIZER_PER_JSON_BYTE)
    # (file, offset, length) of the GGUF blocks a native graph's GgufMatMul nodes multiply by,
    # read whole at every step: faulted in at load (mapped_weights.populate_mapped).
    block_spans: tuple[tuple[Path, int, int], ...] = ()

    @property
    def total(self) -> int:
        return self.weights + self.packed + self.kv + self.tokenizer + self.overhead

    def one_kernel_resident(self) -> MemoryEstimate:
        """The same model run from a mapped packed copy, released around prompts."""
        return replace(self, packed=self.packed_one_kernel)

    def parts(self) -> str:
        return (
            f"weights {fmt_bytes(self.weights)}, packed copies {fmt_bytes(self.packed)}, "
            f"KV cache for {self.context} tokens {fmt_bytes(self.kv)}"
            + (f", tokenizer {fmt_bytes(self.tokenizer)}" if self.tokenizer else "")
        )


def check_context(max_context: int | None) -> None:
    """A context asked for (`--context`) is a whole number of tokens, at least one."""
    if max_context is not None and (
        isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1
    ):
        raise EngineError(f"The context must be at least 1 token; got {max_context}.")


def engine_context(info: ModelInfo, max_context: int | None = None) -> int:
    """The context an Engine allocates for `info` when asked for `max_context` (None: the
    default cap)."""
    return min(info.context_length, max_context or DEFAULT_MAX_CONTEXT)


def check_kv_memory(info: ModelInfo, context: int, remedy: str = "a smaller context") -> None:
    """Refuse a KV cache for `context` tokens that would take more than half of this computer's
    memory (the IO-Binding loop allocates it up front), with the figure, rather than failing
    deep inside numpy or onnxruntime. `remedy`: what to choose instead (slots: their budget)."""
    need = info.kv_bytes_per_token() * context
    total = physical_memory()
    if total is not None and need > total // 2:
        raise EngineError(
            f"The KV cache for {context} tokens of {info.name} would take {whole_mb_up(need)} MB, "
            f"more than half of this computer's {total >> 20} MB; choose {remedy}."
        )


def check_kv_room(info: ModelInfo, context: int) -> None:
    """Refuse one more KV cache for `context` tokens (a comparison's context, or a loop the
    chat switches to, beside the caches already held) where the memory free now cannot hold
    it: the pages are taken as the answer writes them, so an allocation that succeeds would
    end in swapping or the system's out-of-memory killer, and the chat with it."""
    need = info.kv_bytes_per_token() * context
    available = available_memory()
    if available is not None and need > available:
        raise EngineError(
            f"Another KV cache for {context} tokens of {info.name} would take "
            f"{whole_mb_up(need)} MB, but {available >> 20} MB are free; close other programs "
            "or choose a smaller context."
        )


def estimate_memory(read: FolderRead, context: int) -> MemoryEstimate:
    """What the graph of a folder read once (model_description.read_model_folder) holds at
    `context` tokens of KV, from its files' sizes and its nodes (nothing is read again)."""
    info = read.info
    on_disk = info.onnx_path.stat().st_size + sum(f.stat().st_size for f in read.weight_files)
    sizes = packed_sizes(read.graph, read.nodes)
    return MemoryEstimate(
        weights=max(0, on_disk - sizes.replaced),
        packed=sizes.total,
        packed_one_kernel=sizes.one_kernel,
        kv=info.kv_bytes_per_token() * context,
        context=context,
        mapped_files=read.weight_files,
        tokenizer=TOKENIZER_PER_JSON_BYTE * read.tokenizer.json_bytes,
        block_spans=matmul_block_spans(read),
    )


def matmul_block_spans(read: FolderRead) -> tuple[tuple[Path, int, int], ...]:
    """Where the GGUF blocks that GgufMatMul nodes multiply by lie in the files: (file, offset,
    length). Blocks only gathered a row at a time (an untied embedding) are left out."""
    multiplied = {
        node.input[1] for node in read.nodes if node.op_type == "GgufMatMul" and len(node.input) > 1
    }
    spans = []
    for tensor in read.graph.graph.initializer:
        span = read.spans.get(tensor.name) if tensor.name in multiplied else None
        if span is not None and span[2] is not None:
            spans.append((span[0], span[1], span[2]))
    return tuple(spans)


@dataclass(frozen=True)
class PackedSizes:
    int8_kernel: int  # MatMulNBits on accuracy_level 4 (decode steps, the head)
    float_kernel: int  # MatMulNBits on the float kernel (prompts)
    float_matrices: int  # MatMul with a constant right-hand side
    replaced: int  # the originals those copies stand in for, each counted once

    @property
    def total(self) -> int:
        return self.int8_kernel + self.float_kernel + self.float_matrices

    @property
    def one_kernel(self) -> int:
        return max(self.int8_kernel, self.float_kernel) + self.float_matrices


def packed_bytes(proto: onnx.ModelProto) -> tuple[int, int]:
    """(bytes of the packed copies, bytes of the originals they replace)."""
    sizes = packed_sizes(proto, tuple(all_nodes(proto.graph)))
    return sizes.total, sizes.replaced


def packed_sizes(proto: onnx.ModelProto, nodes: tuple[onnx.NodeProto, ...]) -> PackedSizes:
    """What ONNX Runtime's packed copies take, by kernel (`nodes`: the graph's, subgraphs
    included, walked already). Every node packs its own copy; an original shared by several
    nodes is replaced once."""
    sizes = _initializer_sizes(proto, nodes)
    by_kernel = {"int8": 0, "float": 0, "matmul": 0}
    originals: dict[str, int] = {}
    for node in nodes:
        weight = node.input[1] if len(node.input) > 1 else ""
        if node.op_type == "MatMulNBits" and weight in sizes:
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            k, n = int(attrs["K"]), int(attrs["N"])
            blocks = math.ceil(k / int(attrs["block_size"]))
            codes = n * blocks * int(attrs["block_size"]) * int(attrs.get("bits", 4)) // 8
            if attrs.get("accuracy_level", 0) == INT8_KERNEL:
                # The int8 kernel's copy carries a float scale and a float block sum per block.
                by_kernel["int8"] += codes + 2 * 4 * n * blocks
            else:
                by_kernel["float"] += codes
            originals[weight] = sizes[weight]
        elif node.op_type == "MatMul" and weight in sizes:
            by_kernel["matmul"] += sizes[weight]  # the float GEMM's packed B: the same size
            originals[weight] = sizes[weight]
    return PackedSizes(
        by_kernel["int8"], by_kernel["float"], by_kernel["matmul"], sum(originals.values())
    )


def _initializer_sizes(proto: onnx.ModelProto, nodes: tuple[onnx.NodeProto, ...]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    graphs = [proto.graph] + [
        attr.g
        for node in nodes
        for attr in node.attribute
        if attr.type == onnx.AttributeProto.GRAPH
    ]
    for graph in graphs:
        for tensor in graph.initializer:
            itemsize = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
            sizes[tensor.name] = math.prod(tensor.dims) * itemsize
    return sizes


def check_memory(estimate: MemoryEstimate, name: str, freed: int = 0) -> None:
    """Refuse a model that will not fit: against the memory available now plus `freed` (what
    closing the current model gives back), or where that is unknown, all of the RAM."""
    available = available_memory()
    if available is not None:
        room, what = available + freed, "are free"
    else:
        total = physical_memory()
        if total is None:
            return
        room, what = total, "is all this computer has"
    if estimate.total > room:
        raise MemoryRefusal(
            f"{name} needs about {fmt_bytes(estimate.total)} of memory ({estimate.parts()}) "
            f"but {fmt_bytes(room)} {what}; close other programs or choose a smaller model."
        )
