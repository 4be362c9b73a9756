"""Keep only what a model uses resident: the mapped weight file's pages, the process's memory
as people count it. No Qt. (The mapped files kept from changing: file_leases.py.)

ONNX Runtime maps `model.onnx.data` and, at load, reads most of it once to pre-pack the matrix
weights into heap copies; the mapped pages it read stay counted in the process's resident
memory until the kernel needs them back, although the packed copies replace them (the 1B shape:
2.50 GB peak at load against 1.88 GB after it). On Linux, `madvise(MADV_DONTNEED)` drops a
private file mapping's pages from the process: a later read faults them back from the page
cache, byte for byte the same file. A mapping with any page written (copy-on-write, counted as
`Anonymous` in smaps) is left alone, since dropping it would lose the writes. Elsewhere these
are no-ops.

Those mappings are ONNX Runtime's, not the app's: while a session is being made it maps and
unmaps each external tensor, and a range read from smaps may be unmapped and reused by the heap
before the advice reaches it; MADV_DONTNEED then zeroed live heap memory (`free(): invalid
pointer` in 6 of 60 loads of an onnx-community folder, issue 48). So MADV_DONTNEED is only given
while no session is being made or dropped in this process (`_MAPPINGS`, a lock the loads and the
model's closing hold, which each release takes or skips), on ranges that still map the file.
During a load the pages are released with MADV_PAGEOUT (Linux 5.4+) instead: it reclaims a
range's pages but never changes what they hold (a clean file page is read again, a written or
anonymous one goes to swap or stays), whoever owns the range by the time it arrives.
"""

from __future__ import annotations

import bisect
import ctypes
import functools
import gc
import mmap
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np

MADV_DONTNEED = 4
MADV_WILLNEED = 3
MADV_PAGEOUT = 21  # Linux 5.4+: reclaim now, contents kept
MADV_POPULATE_READ = 22  # Linux 5.14+
RELEASE_INTERVAL_S = 0.25  # while a session loads: often enough to keep the file's share small

_LINUX = sys.platform.startswith("linux")


def _libc() -> ctypes.CDLL | None:
    if not _LINUX:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()
# Held while ONNX Runtime may map or unmap weight files (a session being made or dropped);
# MADV_DONTNEED is given only by whoever holds it (see the module's docstring).
_MAPPINGS = threading.RLock()


def release_mapped(files: Iterable[Path]) -> int:
    """Drop this process's unwritten mapped pages of `files`; returns the bytes of the mappings
    released (0 where this cannot be done, or while a session is being made or dropped)."""
    if not _MAPPINGS.acquire(blocking=False):
        return 0
    try:
        return _advise_mappings(files, MADV_DONTNEED)
    finally:
        _MAPPINGS.release()


def _advise_mappings(files: Iterable[Path], advice: int) -> int:
    """`advice` on each unwritten mapping of `files`; the bytes it was given for."""
    if _LIBC is None:
        return 0
    wanted = {os.path.realpath(f) for f in files}
    if not wanted:
        return 0
    advised = 0
    try:
        mappings = list(_file_mappings(wanted))
    except OSError:
        return 0
    for start, end in mappings:
        if _LIBC.madvise(start, end - start, advice) == 0:
            advised += end - start
    return advised


def release_owned(array: np.ndarray) -> int:
    """Give the whole pages inside `array`, memory this process allocated and still holds, back
    to the system: they read as zeros afterwards and take no memory until written again.
    Returns the bytes released (0 where this cannot be done: the contents then stay)."""
    if _LIBC is None or not array.flags.c_contiguous:
        return 0
    page = mmap.PAGESIZE
    start = -(-array.ctypes.data // page) * page
    end = (array.ctypes.data + array.nbytes) // page * page
    if end <= start or _LIBC.madvise(start, end - start, MADV_DONTNEED) != 0:
        return 0
    return end - start


def populate_mapped(spans: Iterable[tuple[Path, int, int]]) -> int:
    """Fault in now this process's mappings that hold any of `spans` (file, offset, length), as
    llama.cpp does when it loads. The GGUF kernels read their blocks whole at every step;
    without this the first answer faulted them in (real Gemma 3 270M: 240 MiB; its first TTFT
    went 96 -> 66 ms with this and a smaller perplexity sample, docs/engine.md). Other tensors
    (Gemma's 64 MiB of RoPE tables, read a row a token) stay lazy: ONNX Runtime maps each
    tensor on its own. One madvise a mapping (MADV_POPULATE_READ; before Linux 5.14
    MADV_WILLNEED, which only reads ahead); returns the bytes populated (0 where this cannot be
    done)."""
    by_file: dict[str, list[tuple[int, int]]] = {}
    for file, offset, length in spans:
        by_file.setdefault(os.path.realpath(file), []).append((offset, length))
    if _LIBC is None or not by_file:
        return 0
    for held in by_file.values():
        held.sort()
    populated = 0
    try:
        mappings = list(_maps_of(set(by_file)))
    except OSError:
        return 0
    for path, low, high, first in mappings:
        if not _overlaps(by_file[path], first, first + high - low):
            continue
        if _LIBC.madvise(low, high - low, MADV_POPULATE_READ) == 0:
            populated += high - low
        else:
            _LIBC.madvise(low, high - low, MADV_WILLNEED)
    return populated


def _overlaps(spans: list[tuple[int, int]], low: int, high: int) -> bool:
    """Does any (offset, length) of sorted `spans` meet [low, high)?"""
    at = bisect.bisect_left(spans, (low, 0))
    if at > 0 and spans[at - 1][0] + spans[at - 1][1] > low:
        return True
    return at < len(spans) and spans[at][0] < high


def _file_mappings(paths: set[str]) -> Iterator[tuple[int, int]]:
    """(start, end) of each mapping of `paths` with no copy-on-write page."""
    current: tuple[int, int] | None = None
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
        for line in smaps:
            head, _, rest = line.partition(" ")
            if "-" in head and not head.endswith(":"):
                fields = rest.split(maxsplit=4)
                path = fields[4].strip() if len(fields) == 5 else ""
                if path in paths:
                    low, high = head.split("-")
                    current = (int(low, 16), int(high, 16))
                else:
                    current = None
            elif head == "Anonymous:" and current is not None:
                if int(rest.split()[0]) == 0:
                    yield current
                current = None


class MappedPages:
    """`release_mapped` for a session that will not map anything new: the mappings are found
    (and checked for written pages) once, from /proc/self/smaps, which takes ~0.1 s with the
    hundreds of mappings ONNX Runtime makes; each release then reads only /proc/self/maps to
    check that every range still maps the same file."""

    def __init__(self, files: Iterable[Path]) -> None:
        self.paths = {os.path.realpath(f) for f in files}
        self._ranges: list[tuple[int, int]] | None = None

    def release(self) -> int:
        if _LIBC is None or not self.paths:
            return 0
        if not _MAPPINGS.acquire(blocking=False):  # a session is being made: not now
            return 0
        try:
            if self._ranges is None:
                self._ranges = list(_file_mappings(self.paths))
            current = _current_ranges(self.paths)
        except OSError:
            _MAPPINGS.release()
            return 0
        released = 0
        try:
            for start, end in self._ranges:
                if (start, end) in current and _LIBC.madvise(
                    start, end - start, MADV_DONTNEED
                ) == 0:
                    released += end - start
        finally:
            _MAPPINGS.release()
        return released


def _current_ranges(paths: set[str]) -> set[tuple[int, int]]:
    return {(low, high) for _, low, high, _ in _maps_of(paths)}


def _maps_of(paths: set[str]) -> Iterator[tuple[str, int, int, int]]:
    """(path, start, end, the file offset it starts at) of each mapping of `paths`, from
    /proc/self/maps."""
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and (path := fields[5].strip()) in paths:
                low, high = fields[0].split("-")
                yield path, int(low, 16), int(high, 16), int(fields[2], 16)


@contextmanager
def released_while_loading(files: Iterable[Path]) -> Iterator[None]:
    """While the body makes a session (which reads each weight once to pack it, mapping and
    unmapping as it goes): reclaim `files`' mapped pages every RELEASE_INTERVAL_S with
    MADV_PAGEOUT, which keeps any memory's contents; once the session is made, drop what is
    left with MADV_DONTNEED. No other load, drop or release runs in this process meanwhile."""
    paths = list(files)
    with _MAPPINGS:
        if _LIBC is None or not paths:
            yield
            return
        done = threading.Event()

        def keep_reclaiming() -> None:
            if not _kernel_takes(MADV_PAGEOUT):  # before Linux 5.4: kept until the load ends
                return
            while not done.wait(RELEASE_INTERVAL_S):
                _advise_mappings(paths, MADV_PAGEOUT)

        thread = threading.Thread(target=keep_reclaiming, name="reclaim-weight-pages", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            _advise_mappings(paths, MADV_DONTNEED)  # the session holds its mappings now


@functools.cache
def _kernel_takes(advice: int) -> bool:
    """Whether madvise knows `advice`, tried on a page of the app's own (a fresh mapping)."""
    if _LIBC is None:
        return False
    page = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        view = ctypes.c_char.from_buffer(page)
        try:
            return bool(_LIBC.madvise(ctypes.addressof(view), mmap.PAGESIZE, advice) == 0)
        finally:
            del view
    finally:
        page.close()


@contextmanager
def dropping_sessions() -> Iterator[None]:
    """Around code that may drop a session (a model closed, collected): ONNX Runtime unmaps its
    weights then, so no release may run meanwhile."""
    with _MAPPINGS:
        yield


def return_freed_heap() -> None:
    """After a model is closed: collect it, and have glibc hand freed heap back to the system."""
    with dropping_sessions():
        gc.collect()
    if _LIBC is not None:
        with suppress(AttributeError):  # not glibc (musl)
            _LIBC.malloc_trim(0)


def resident_memory() -> dict[str, int]:
    """This process's resident bytes now ("rss"), at most so far ("peak"), and how much is
    file-backed ("file") and anonymous ("anon"); {} where /proc is not there."""
    fields = {"VmRSS": "rss", "VmHWM": "peak", "RssFile": "file", "RssAnon": "anon"}
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in fields:
                    found[fields[key]] = int(value.split()[0]) * 1024
    except OSError:
        return {}
    return found
