"""chatapp's native GGUF kernels (native/, docs/converter.md "Native kernels") for ONNX Runtime.

A native graph (`chatapp convert --graph auto|native|both`) multiplies by raw GGUF blocks with the
custom operator `chatapp.gguf.GgufMatMul`; its sessions need the library registered, and run on
the CPU only (the operator has no device kernel, and running it on the host would move the KV
cache through it every step). Stock graphs never load the library. Which graph of a folder a
session takes: model_folder/read.py (`native_preferred` below). A session registers the
library when its graph needs it (devices.register_if_needed), after the graph's native nodes
are checked against their weights (folder_format/graph.native_node_problem).
"""

from __future__ import annotations

from chatapp.engine.errors import ModelError
from chatapp.folder_format.native_library import library_isa as library_isa
from chatapp.folder_format.native_library import library_path as library_path
from chatapp.folder_format.native_library import usable_isa

NOT_BUILT = "it needs chatapp's GGUF kernels, which are not built here (`make native`)"


class NativeKernelsUnavailable(ModelError):
    """A native-only folder where its kernels cannot run (not built, or not on this device)."""


class NativeNodeMismatch(ModelError):
    """A native node whose attributes disagree with its weight: the kernel would refuse it at
    the first answer, so the folder is refused at load."""


def native_preferred(on_cpu: bool) -> bool:
    """Whether a session should take a folder's native graph over its stock one: on the CPU,
    with the library here and its fast kernels (not the scalar fallback)."""
    return on_cpu and usable_isa() is not None
