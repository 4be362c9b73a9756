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
