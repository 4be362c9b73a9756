"""chatapp's native GGUF kernels (native/, docs/converter.md "Native kernels") for ONNX Runtime.

A folder converted with `chatapp convert --native` multiplies by raw GGUF blocks with the custom
operator `chatapp.gguf.GgufMatMul`; its sessions need the library registered, and run on the CPU
only (the operator has no device kernel, and running it on the host would move the KV cache
through it every step). Stock folders never load the library.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache
from pathlib import Path

import onnx
import onnxruntime as ort

from chatapp.engine.errors import ModelError
from chatapp.folder_format.graph import NATIVE_DOMAIN

LIBRARY_NAME = "libchatapp_gguf.so"
LIBRARY_ENV = "CHATAPP_NATIVE_LIB"  # a path, for a library built elsewhere


class NativeKernelsUnavailable(ModelError):
    """A --native folder where its kernels cannot run (not built, or not on this device)."""


def library_candidates() -> list[Path]:
    """Where the library may be, in order: $CHATAPP_NATIVE_LIB, the PyInstaller bundle, the
    source checkout's native/build (what `make native` writes)."""
    found: list[Path] = []
    if named := os.environ.get(LIBRARY_ENV):
        found.append(Path(named))
    bundle = getattr(sys, "_MEIPASS", None)
    if bundle:
        found.append(Path(bundle) / "chatapp_native" / LIBRARY_NAME)
    package = Path(__file__).resolve().parent.parent
    found.append(package / "native" / LIBRARY_NAME)
    found.append(package.parent / "native" / "build" / LIBRARY_NAME)
    return found


def library_path() -> Path | None:
    return next((p for p in library_candidates() if p.is_file()), None)


def library_isa() -> str | None:
    """The instruction set the kernels pick on this machine (avx512vnni, avx2, scalar)."""
    path = library_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(str(path))
        lib.chatapp_gguf_isa.restype = ctypes.c_char_p
        return str(lib.chatapp_gguf_isa().decode())
    except (OSError, AttributeError):
        return None


@lru_cache(maxsize=32)
def _declares_native(path: str, mtime_ns: int, size: int) -> bool:
    del mtime_ns, size  # the cache key: a rewritten file is read again
    model = onnx.load(path, load_external_data=False)
    return any(o.domain == NATIVE_DOMAIN for o in model.opset_import)


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
            f"This model was converted with --native, whose kernels run on the CPU only; convert "
            f"the GGUF again without --native to run it on {device_label}."
        )
    path = library_path()
    if path is None:
        raise NativeKernelsUnavailable(
            "This model was converted with --native, but chatapp's native kernels are not built "
            "here; run `make native`, or convert the GGUF again without --native."
        )
    opts.register_custom_ops_library(str(path))
