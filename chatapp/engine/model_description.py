"""A model folder read once: what an Engine, a packed copy and a load's memory check are built
from. No Qt.

llama.cpp splits a model (what was read from its file) from the context that runs it; here
`ModelDescription` is the model: the graph chosen for a device, its description (`ModelInfo`:
KV layout, tokens, context), whether it runs on the GGUF kernels, the sampling it suggests and
what it will hold in memory at the context an engine allocates. `read_model` reads it in one
pass down the folder: its configs (read.py), the graph chosen for the device and read once
without its weights, its nodes walked once (folder_format/graph.py), the graph described
(read.py), its memory estimated (memory.py) and its sampling suggested
(sampling_defaults.py).
It is immutable and passed down: `packed_cache.prepare_folder` saves the packed copy from it, a
load checks its memory (`engine.open_model`) and the `Engine` starts its session and loops
from it (the context of the split).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.errors import FolderFileError, ModelError
from chatapp.engine.memory import (
    MemoryEstimate,
    check_context,
    check_kv_memory,
    engine_context,
    estimate_memory,
)
from chatapp.engine.model_folder.model import FolderRead, ModelInfo, TokenizerFiles
from chatapp.engine.model_folder.read import (
    check_configs,
    describe_graph,
    external_data_files,
    graph_candidates,
    read_configs,
    read_onnx_graph,
    read_tokenizer_files,
)
from chatapp.engine.model_folder.sampling_defaults import ModelSampling, sampling_of
from chatapp.engine.native_kernels import native_preferred
from chatapp.folder_format.graph import all_nodes, declares_native, float_kernel_graph
from chatapp.folder_format.native_library import library_isa

CPU_NAME = "cpu"  # devices.CPU's name (devices.py imports onnxruntime; this module does not)


def is_cpu(device: str) -> bool:
    """Whether the device named on the command line or in the panel is the CPU (a native graph
    of the folder is then preferred: files.by_device)."""
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
