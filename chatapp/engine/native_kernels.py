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
from chatapp.folder_format.graph import declares_native
from chatapp.folder_format.native_library import library_isa as library_isa
from chatapp.folder_format.native_library import library_path as library_path
from chatapp.folder_format.native_library import usable_isa

NOT_BUILT = "it needs chatapp's GGUF kernels, which are not built here (`make native`)"


class NativeKernelsUnavailable(ModelError):
    """A native-only folder where its kernels cannot run (not built, or not on this device)."""


def native_preferred(on_cpu: bool) -> bool:
    """Whether a session should take a folder's native graph over its stock one: on the CPU,
    with the library here and its fast kernels (not the scalar fallback)."""
    return on_cpu and usable_isa() is not None


def kernels_label(model: Path) -> str:
    """Which kernels run the graph, for the backend line ("GGUF kernels, AVX2")."""
    if not needs_native(model):
        return "ONNX Runtime kernels"
    isa = library_isa()
    names = {"avx2": "AVX2", "avx512vnni": "AVX-512 VNNI", "scalar": "scalar"}
    return f"GGUF kernels, {names.get(isa or '', isa or 'not built')}"


@lru_cache(maxsize=32)
def _declares_native(path: str, mtime_ns: int, size: int) -> bool:
    del mtime_ns, size  # the cache key: a rewritten file is read again
    return declares_native(onnx.load(path, load_external_data=False))


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
    opts.register_custom_ops_library(str(path))
