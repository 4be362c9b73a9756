"""How much memory this computer has, and how much a new allocation can take now.

Used by the converter's preflight, the engine's refusal of a model that does not fit and its
check of the KV cache's size: one reading of the system for all three (no psutil needed).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def available_memory() -> int | None:
    """Bytes a new allocation can take without swapping (Linux: MemAvailable; Windows:
    available physical memory); None where the platform does not say."""
    try:
        if sys.platform.startswith("linux"):
            return _meminfo("MemAvailable")
        if sys.platform == "win32":
            return _windows_memory()[1]
        return None  # macOS and the BSDs count free pages only, which ignores the file cache
    except (OSError, ValueError, AttributeError):
        return None


def physical_memory() -> int | None:
    """Bytes of RAM, or None when the platform does not say."""
    try:
        if sys.platform == "win32":
            return _windows_memory()[0]
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (OSError, ValueError, AttributeError):
        return None


def _meminfo(field: str) -> int | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == field:
            return int(value.split()[0]) * 1024  # kB
    return None


def _windows_memory() -> tuple[int, int]:
    """(total, available) physical memory."""
    import ctypes

    class _Status(ctypes.Structure):
        _fields_ = [
            ("length", ctypes.c_ulong),
            ("load", ctypes.c_ulong),
            ("total", ctypes.c_ulonglong),
            ("available", ctypes.c_ulonglong),
            ("total_page", ctypes.c_ulonglong),
            ("available_page", ctypes.c_ulonglong),
            ("total_virtual", ctypes.c_ulonglong),
            ("available_virtual", ctypes.c_ulonglong),
            ("available_extended", ctypes.c_ulonglong),
        ]

    status = _Status()
    status.length = ctypes.sizeof(_Status)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        raise OSError("GlobalMemoryStatusEx failed")
    return int(status.total), int(status.available)
