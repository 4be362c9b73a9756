"""Where chatapp's native GGUF kernels (native/, docs/converter.md "Native kernels") are, and
whether they are worth using on this machine.

Both sides ask: the converter, to pick the graph `chatapp convert --graph auto` writes, and the
engine, to pick the graph a CPU session runs and to register the library. Kept below both.
"""

from __future__ import annotations

import ctypes
import os
import sys
from functools import lru_cache
from pathlib import Path

LIBRARY_NAME = "libchatapp_gguf.so"
# A path to a library built elsewhere, or "none": behave as if it were not built (tests, users
# who want the stock graph everywhere).
LIBRARY_ENV = "CHATAPP_NATIVE_LIB"
NO_LIBRARY = "none"
# The instruction sets whose kernels beat the stock graph; the scalar fallback does not.
FAST_ISAS = ("avx2", "avx512vnni")


def library_candidates() -> list[Path]:
    """Where the library may be, in order: $CHATAPP_NATIVE_LIB, the PyInstaller bundle, the
    source checkout's native/build (what `make native` writes)."""
    named = os.environ.get(LIBRARY_ENV, "")
    if named.strip().lower() == NO_LIBRARY:
        return []
    found: list[Path] = []
    if named:
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


@lru_cache(maxsize=8)
def _isa_of(path: str, mtime_ns: int, asked: str | None) -> str | None:
    del mtime_ns, asked  # the cache key: a rebuilt library or another CHATAPP_GGUF_ISA
    try:
        lib = ctypes.CDLL(path)
        lib.chatapp_gguf_isa.restype = ctypes.c_char_p
        return str(lib.chatapp_gguf_isa().decode())
    except (OSError, AttributeError):
        return None  # not loadable here (another architecture, a broken file)


def isa_of(path: Path) -> str | None:
    """The instruction set the library at `path` picks on this machine (avx512vnni, avx2,
    scalar); None when it does not load."""
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    return _isa_of(str(path), mtime, os.environ.get("CHATAPP_GGUF_ISA"))


def library_isa() -> str | None:
    path = library_path()
    return None if path is None else isa_of(path)


def usable_isa() -> str | None:
    """The fast instruction set the native kernels run here, or None when the stock graph is
    the better choice (no library, one that does not load, or only the scalar fallback)."""
    isa = library_isa()
    return isa if isa in FAST_ISAS else None


@lru_cache(maxsize=8)
def _net_of(path: str, mtime_ns: int) -> ctypes.CDLL | None:
    del mtime_ns  # the cache key: a rebuilt library
    try:
        lib = ctypes.CDLL(path)
        for name in ("chatapp_sigbus_register", "chatapp_sigbus_faults"):
            getattr(lib, name).restype = ctypes.c_longlong
            getattr(lib, name).argtypes = (ctypes.c_uint, ctypes.c_uint, ctypes.c_ulonglong)
        lib.chatapp_sigbus_release.argtypes = (ctypes.c_uint, ctypes.c_uint, ctypes.c_ulonglong)
        lib.chatapp_sigbus_release.restype = None
        if lib.chatapp_sigbus_install() != 1:
            return None
    except (OSError, AttributeError):
        return None  # not loadable here, or built before the net (native/mapped_file_net.inc)
    return lib


def sigbus_net() -> ctypes.CDLL | None:
    """The native library with its SIGBUS net for mapped weight files installed (process-wide,
    from any thread; native/mapped_file_net.inc, engine/mapped_weights.py), or None where there is
    none (no library, CHATAPP_NATIVE_LIB=none, not Linux)."""
    path = library_path()
    if path is None or not sys.platform.startswith("linux"):
        return None
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return None
    return _net_of(str(path), mtime)
