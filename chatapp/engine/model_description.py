"""A model folder read once: what an Engine, a packed copy and a load's memory check are built
from. No Qt.

llama.cpp splits a model (what was read from its file) from the context that runs it; here
`ModelDescription` is the model: the graph chosen for a device, its description (`ModelInfo`:
KV layout, tokens, context), whether it runs on the GGUF kernels, the sampling it suggests and
what it will hold in memory at the context an engine allocates, all read by `read_model` from
the folder's configs and one read of the graph (never its weights).
It is immutable and passed down: `packed_cache.prepare_folder` saves the packed copy from it, a
load checks its memory (`engine.check_fits`) and the `Engine` starts its session and loops
from it (the context of the split).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.guards import check_context, check_kv_memory
from chatapp.engine.memory import MemoryEstimate, estimate_memory
from chatapp.engine.model_folder.model import ModelInfo, read_model_folder
from chatapp.engine.model_folder.sampling_defaults import ModelSampling, sampling_of
from chatapp.folder_format.graph import declares_native

# IO-Binding allocates KV for the whole context up front; cap it so a 128k-context model
# does not reserve gigabytes for a chat that will use a few thousand tokens.
DEFAULT_MAX_CONTEXT = 8192
CPU_NAME = "cpu"  # devices.CPU's name (devices.py imports onnxruntime; this module does not)


def engine_context(info: ModelInfo, max_context: int | None = None) -> int:
    """The context an Engine allocates for `info` when asked for `max_context` (None: the
    default cap)."""
    return min(info.context_length, max_context or DEFAULT_MAX_CONTEXT)


def is_cpu(device: str) -> bool:
    """Whether the device named on the command line or in the panel is the CPU (a native graph
    of the folder is then preferred: model_folder/model.py)."""
    return device.strip().lower() == CPU_NAME


@dataclass(frozen=True)
class ModelDescription:
    """One model folder as read for one kind of device: sessions and loops are built from it."""

    info: ModelInfo  # the graph chosen and what it says (folder, KV layout, tokens, context)
    memory: MemoryEstimate  # what it holds while answering at `context` tokens
    on_cpu: bool  # read for the CPU (a native graph preferred) or for another device
    native: bool  # the graph runs on chatapp's GGUF kernels (native_kernels.py)
    sampling: ModelSampling  # what the model suggests sampling with (its configs or a preset)
    # The graph the user picked (relative to the folder); None: chosen for the device.
    onnx_file: str | None = None

    @property
    def folder(self) -> Path:
        return self.info.folder

    @property
    def context(self) -> int:
        """The context an engine allocates for it (the KV cache's tokens)."""
        return self.memory.context


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
    info, proto, config, generation = read_model_folder(folder, onnx_file, on_cpu=on_cpu)
    context = engine_context(info, max_context)
    check_kv_memory(info, context)
    return ModelDescription(
        info,
        estimate_memory(info, context, proto),
        on_cpu,
        native=declares_native(proto),
        sampling=sampling_of(info.folder, config, generation, info.onnx_path.stat().st_size),
        onnx_file=onnx_file,
    )
