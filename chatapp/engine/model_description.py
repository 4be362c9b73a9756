"""A model as known before it runs, in one room: its folder read once for a device, what it
will hold in memory (and the refusal when that does not fit), and the sampling it starts with.
No Qt.

llama.cpp splits a model (what was read from its file) from the context that runs it; here
`ModelDescription` is the model as read: the graph chosen for a device, its description
(`ModelInfo`: KV layout, tokens, context), whether it runs on the GGUF kernels, the sampling it
suggests and what it will hold in memory at the context an engine allocates. `read_model` reads
it in one pass down the folder: its configs, the graph chosen for the device and read once
without its weights, and the graph described (model_folder/read.py), its nodes walked once
(folder_format/graph.py), then its memory estimated and its sampling suggested (both below).
It is immutable and passed down: `packed_cache.prepare_folder` saves the packed copy from it, a
load checks its memory (`loaded_model.open_model`) and `loaded_model.start_model` starts its
session from it (contexts are then made from the loaded model).

Memory (the middle of this module): what a model will hold while it answers, what this computer
has free, and the refusal when the first does not fit in the second. The estimate is made from
the folder as read once, before anything is loaded: the weights once (the graph and its external
data), plus ONNX Runtime's pre-packed copies of the matrix weights (MatMulNBits and MatMul with a
constant right-hand side: each node packs its own copy for its kernel, and a
converter-version-6+ graph runs two kernels on the same weights, one for prompts and one for
decode steps), minus the originals those copies replace, plus the KV cache at the engine's
context (allocated up front by the IO-Binding loop and refused beyond half of the memory:
`check_kv_memory`), the tokenizer (from the size of its tokenizer.json) and a fixed allowance
for the runtime and a prompt's activations. docs/engine.md, "Memory while answering", compares
it with measured peaks.

Sampling (the end of this module): what the folder's generation_config.json says, or else a
preset chosen by the model's size (the presets themselves, the window's buttons, are named
settings and live with `SamplingSettings` in sampling.py). A 135M-parameter model answers "What
is the capital of France?" with "Paris" when it picks the most likely token, and with inventions
at temperature 0.7; larger models cope with sampling and their authors often ship the settings
they tested in generation_config.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import onnx

from chatapp.engine.errors import EngineError, FolderFileError, ModelError
from chatapp.engine.model_folder.model import FolderRead, ModelInfo, TokenizerFiles
from chatapp.engine.model_folder.read import (
    check_configs,
    describe_graph,
    external_data_files,
    graph_candidates,
    read_configs,
    read_json_file,
    read_onnx_graph,
    read_tokenizer_files,
)
from chatapp.engine.native_kernels import native_preferred
from chatapp.engine.sampling import PRESET_LABELS, PRESETS, SamplingSettings
from chatapp.folder_format.graph import all_nodes, declares_native, float_kernel_graph
from chatapp.folder_format.manifest import MANIFEST_FILE
from chatapp.folder_format.native_library import library_isa
from chatapp.system_memory import available_memory, physical_memory
from chatapp.units import fmt_bytes, whole_mb_up

CPU_NAME = "cpu"  # devices.CPU's name (devices.py imports onnxruntime; this module does not)


def is_cpu(device: str) -> bool:
    """Whether the device named on the command line or in the panel is the CPU (a native graph
    of the folder is then preferred: model_folder/read.by_device)."""
    return device.strip().lower() == CPU_NAME


@dataclass(frozen=True)
class ModelDescription:
    """One model folder as read for one kind of device: sessions and loops are built from it."""

    info: ModelInfo  # the graph chosen and what it says (folder, KV layout, tokens, context)
    memory: MemoryEstimate  # what it holds while answering at `context` tokens
    on_cpu: bool  # read for the CPU (a native graph preferred) or for another device
    native: bool  # the graph runs on chatapp's GGUF kernels (native_kernels.py)
    sampling: ModelSampling  # what the model suggests sampling with (its configs or a preset)
    tokenizer: (
        TokenizerFiles  # its tokenizer files, checked and read (engine/text/chat.py builds on them)
    )
    # The graph the user picked (relative to the folder); None: chosen for the device.
    onnx_file: str | None = None
    # The CPU would choose the same graph (so a fall-back there needs no second read).
    cpu_same: bool = True
    # Read for a device: the graph its session runs where it differs from the file (int8
    # levels on the float kernels, no step/prompt If: folder_format/graph.float_kernel_graph).
    device_graph: bytes | None = None

    @property
    def folder(self) -> Path:
        return self.info.folder

    @property
    def context(self) -> int:
        """The context an engine allocates for it (the KV cache's tokens)."""
        return self.memory.context

    @property
    def kernels(self) -> str:
        """Which kernels run its graph, for the backend line: "GGUF kernels, AVX2" (chatapp's
        native graph, with the instruction set its library picked) or "ONNX Runtime kernels"."""
        if not self.native:
            return "ONNX Runtime kernels"
        isa = library_isa()
        names = {"avx2": "AVX2", "avx512vnni": "AVX-512 VNNI", "scalar": "scalar"}
        return f"GGUF kernels, {names.get(isa or '', isa or 'not built')}"


def read_model(
    folder: Path | str,
    onnx_file: str | None = None,
    device: str = CPU_NAME,
    max_context: int | None = None,
) -> ModelDescription:
    """Read the model in `folder` once, for `device`, at the context an engine allocates when
    asked for `max_context`: ModelError (or EngineError for a context that cannot be) says why
    it cannot be opened. The one place a model folder is read for running."""
    check_context(max_context)
    on_cpu = is_cpu(device)
    read = read_model_folder(folder, onnx_file, on_cpu)
    context = engine_context(read.info, max_context)
    check_kv_memory(read.info, context)
    return ModelDescription(
        read.info,
        estimate_memory(read, context),
        on_cpu,
        native=read.native,
        sampling=sampling_of(
            read.info.folder,
            read.config,
            read.generation,
            read.info.onnx_path.stat().st_size,
            made_by_chatapp=read.made_by_chatapp,
        ),
        tokenizer=read.tokenizer,
        onnx_file=onnx_file,
        cpu_same=read.cpu_same,
        device_graph=read.device_graph,
    )


def open_model_folder(
    folder: Path | str, onnx_file: str | Path | None = None, on_cpu: bool = True
) -> ModelInfo:
    """Describe the model in `folder` (as `read_model_folder`, without the graph)."""
    return read_model_folder(folder, onnx_file, on_cpu).info


def read_model_folder(
    folder: Path | str, onnx_file: str | Path | None = None, on_cpu: bool = True
) -> FolderRead:
    """Describe the model in `folder`, with the graph and configs read for it (the graph
    without its weights: the memory estimate reads its initializers' sizes from it);
    ModelError says what is missing or unsupported.

    Without `onnx_file`: the graph genai_config.json names, else the most precise graph that
    this app can open (fp32 before fp16 before int8 / q4 ...), not the alphabetically first;
    and a native graph beside it (model_gguf.onnx, chatapp's GGUF kernels) before either when
    the session runs `on_cpu` with the library usable, never otherwise (files.by_device).
    Every file it names is opened only inside the folder (see model_folder/read.py): a graph or an
    external data file that is missing, a link out or not a regular file refuses the folder
    rather than being skipped for the next graph.
    """
    configs = read_configs(folder)
    decoder_file = check_configs(configs.config, configs.genai)
    folder = configs.folder
    candidates = graph_candidates(folder, onnx_file, decoder_file, native_preferred(on_cpu))
    cpu_same = on_cpu or candidates == graph_candidates(
        folder, onnx_file, decoder_file, native_preferred(True)
    )
    tokenizer = read_tokenizer_files(folder)  # checked and read once: the tokenizer's source
    if configs.config is None and configs.genai is None:
        raise ModelError(f"{folder.name} has neither config.json nor genai_config.json.")
    first_error: ModelError | None = None
    for onnx_path in candidates:
        try:
            proto, spans = read_onnx_graph(onnx_path)
            weight_files = external_data_files(proto, onnx_path)
            nodes = tuple(all_nodes(proto.graph))
            native = declares_native(proto)
            # A device's session runs the float kernels' graph (a native one cannot run there).
            device_graph = None if on_cpu or native else float_kernel_graph(proto)
            info = describe_graph(
                folder,
                onnx_path,
                proto.graph,
                frozenset(node.op_type for node in nodes),
                configs.config or {},
                configs.genai or {},
                configs.generation,
            )
        except FolderFileError:
            raise
        except ModelError as exc:
            first_error = first_error or exc
            continue
        return FolderRead(
            info,
            proto,
            nodes,
            native,
            tuple(weight_files),
            configs.config or {},
            configs.generation,
            configs.made_by_chatapp,
            tokenizer,
            spans,
            cpu_same,
            device_graph,
        )
    assert first_error is not None
    if len(candidates) > 1:
        raise ModelError(
            f"None of the {len(candidates)} ONNX graphs in {folder.name} can be run here; "
            f"the first: {first_error}"
        ) from first_error
    raise first_error


# ---- memory: what a model will hold while it answers, and the refusal when it does not fit ----

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
    """What the graph of a folder read once (`read_model_folder`) holds at
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


# ---- sampling: what the folder's generation_config.json says, or a preset for its size -------

GENERATION_CONFIG = "generation_config.json"
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "repetition_penalty")
# Models below this many parameters get the Precise preset, the rest Balanced.
SMALL_MODEL_PARAMETERS = 1_000_000_000

# The range the window's controls offer; a file asking for more is not followed.
LIMITS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_k": (0.0, 1000.0),
    "top_p": (0.01, 1.0),
    "repetition_penalty": (1.0, 2.0),
}
# What transformers assumes for a key the file leaves out when do_sample is true.
HF_SAMPLING_DEFAULTS = {"temperature": 1.0, "top_k": 50, "top_p": 1.0, "repetition_penalty": 1.0}


@dataclass(frozen=True)
class ModelSampling:
    """The sampling a model suggests and where that comes from, in words for the user."""

    settings: SamplingSettings
    source: str  # "its generation_config.json" or "the Precise preset for ... parameters"
    preset: str | None  # the preset `settings` equals, if any
    parameters: int | None = None  # estimated from config.json (or the graph's size)
    notice: str | None = None  # why a generation_config.json was not followed


def matching_preset(settings: SamplingSettings) -> str | None:
    """The preset whose sampling values `settings` has (max tokens and seed aside)."""
    for name, preset in PRESETS.items():
        if all(_same(getattr(settings, f), getattr(preset, f)) for f in SAMPLING_FIELDS):
            return name
    return None


def preset_for(parameters: int | None) -> str:
    if parameters is not None and parameters >= SMALL_MODEL_PARAMETERS:
        return "balanced"
    return "precise"


def model_sampling(folder: Path | str, graph_bytes: int | None = None) -> ModelSampling:
    """What the model in `folder` should sample with. A bad generation_config.json is left
    aside with a notice (the preset applies); nothing here raises for a folder's content."""
    folder = Path(folder)
    try:
        generation, unreadable = read_json_file(folder, GENERATION_CONFIG), None
    except ModelError as exc:
        generation, unreadable = None, exc
    return sampling_of(
        folder,
        _json(folder, "config.json"),
        generation,
        graph_bytes,
        unreadable,
        made_by_chatapp=_made_by_chatapp(folder),
    )


def sampling_of(
    folder: Path,
    config: dict[str, Any] | None,
    generation: dict[str, Any] | None,
    graph_bytes: int | None = None,
    unreadable: Exception | None = None,
    made_by_chatapp: bool = False,
) -> ModelSampling:
    """`model_sampling` for a folder whose config.json, generation_config.json and manifest
    were read already (None or {}: the folder has none; `unreadable`: why the second could
    not be; `made_by_chatapp`: the manifest names chatapp's converter)."""
    parameters = estimate_parameters(config or None)
    if parameters is None and graph_bytes:
        parameters = graph_bytes // 2  # about 16 bits per weight: a guess for the preset only
    problem: Exception | None = unreadable
    from_file = None
    if generation and problem is None:
        try:
            from_file = sampling_from_config(generation, made_by_chatapp)
        except ValueError as exc:
            problem = exc
    if from_file is not None:
        preset = matching_preset(from_file)
        return ModelSampling(from_file, f"its {GENERATION_CONFIG}", preset, parameters)
    name = preset_for(parameters)
    size = f"a model of about {describe_count(parameters)} parameters" if parameters else "it"
    source = f"the {PRESET_LABELS[name]} preset, suggested for {size}"
    notice = None
    if problem is not None:
        notice = f"{GENERATION_CONFIG} of {folder.name} is not followed: {problem} Using {source}."
    return ModelSampling(PRESETS[name], source, name, parameters, notice)


def sampling_from_config(
    config: dict[str, Any], written_by_chatapp: bool
) -> SamplingSettings | None:
    """The sampling a generation_config.json asks for; None when it says nothing about it.

    do_sample false means the most likely token (transformers' meaning); true means sampling
    with the file's values and transformers' defaults for the rest. Without do_sample, sampling
    keys are taken as meant. chatapp's converter writes `do_sample: false` only because that
    is transformers' default, not as advice: such a file without sampling keys says nothing.
    ValueError names a value out of range."""
    keys = {k: config[k] for k in SAMPLING_FIELDS if config.get(k) is not None}
    values = {k: _checked(k, v) for k, v in keys.items()}
    do_sample = config.get("do_sample")
    if do_sample is not None and not isinstance(do_sample, bool):
        raise ValueError(f"do_sample is {do_sample!r}, not true or false.")
    if do_sample is None or (do_sample is False and written_by_chatapp and not keys):
        if not keys:
            return None
        do_sample = values.get("temperature", 1.0) > 0
    base = PRESETS["precise"]
    if not do_sample:
        return replace(
            base, temperature=0.0, repetition_penalty=values.get("repetition_penalty", 1.0)
        )
    merged = {**HF_SAMPLING_DEFAULTS, **values}
    return replace(
        base,
        temperature=float(merged["temperature"]),
        top_k=int(merged["top_k"]),
        top_p=float(merged["top_p"]),
        repetition_penalty=float(merged["repetition_penalty"]),
    )


def estimate_parameters(config: dict[str, Any] | None) -> int | None:
    """Weights of a decoder described by a Hugging Face config.json (None if it cannot say):
    attention and gated MLP per layer, the embedding, and the output head unless tied."""
    if not config:
        return None
    try:
        hidden = _count(config, "hidden_size")
        layers = _count(config, "num_hidden_layers")
        inner = _count(config, "intermediate_size")
        vocab = _count(config, "vocab_size")
        heads = _count(config, "num_attention_heads")
        kv_heads = _count(config, "num_key_value_heads", heads)
        head_dim = _count(config, "head_dim", hidden // heads)
    except ValueError:
        return None
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    per_layer = attention + 3 * hidden * inner + 2 * hidden
    tied = config.get("tie_word_embeddings", True) is not False
    return layers * per_layer + vocab * hidden * (1 if tied else 2)


def describe_count(parameters: int) -> str:
    """135M, 1.2B, 8B."""
    if parameters >= 10**9:
        value, unit = parameters / 10**9, "B"
    else:
        value, unit = parameters / 10**6, "M"
    return f"{value:.1f}".rstrip("0").rstrip(".") + unit if value < 10 else f"{value:.0f}{unit}"


def _checked(key: str, value: Any) -> float:
    low, high = LIMITS[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{key} is {value!r}, not a number.")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{key} is {value}, outside {low:g} to {high:g}.")
    if key == "top_k" and not float(value).is_integer():
        raise ValueError(f"top_k is {value}, not a whole number.")
    return float(value)


def _count(config: dict[str, Any], key: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 1 << 24:
        raise ValueError(key)
    return value


def _json(folder: Path, name: str) -> dict[str, Any] | None:
    try:
        return read_json_file(folder, name)
    except ModelError:
        return None


def _made_by_chatapp(folder: Path) -> bool:
    manifest = _json(folder, MANIFEST_FILE)
    return manifest is not None and manifest.get("converter") == "chatapp"


def _same(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) < 1e-6
