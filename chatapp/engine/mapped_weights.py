"""The weight files a session maps, in one room: only the pages in use kept resident, and the
files kept from changing under a running answer; with the process's memory as people count it
and the heap it gives back. No Qt.

Pages. ONNX Runtime maps `model.onnx.data` and, at load, reads most of it once to pre-pack the
matrix weights into heap copies; the mapped pages it read stay counted in the process's resident
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

Kept from changing (the second half of this module). Their identities are checked before
each run (`MappedFiles`), read leases keep other programs from cutting one short meanwhile, and
the SIGBUS net lies behind them. Leases and the net: Linux; elsewhere the identity check alone.

ONNX Runtime maps a model's external data and chatapp's GGUF kernels read the blocks from that
mapping; a page past the new end of a file truncated meanwhile raises SIGBUS, which ends the
process (the window, `chatapp serve` and every client with it). Python cannot catch it. Two
layers (issue 48):
- a read lease (`fcntl(F_SETLEASE, F_RDLCK)`): Linux makes any other process that opens the
  file to write, or truncates it, wait until the holder lets go (at most
  /proc/sys/fs/lease-break-time, 45 s by default) and tells the holder (SIGIO). The app lets
  go as soon as no forward pass is running (at most one step later), so the other program
  waits milliseconds and no read ever sees a cut file; every forward after that is refused
  with one line naming the file (`MappedFilesChanged`), and opening the model again maps the
  file as it now is. What the lease adds over the net: the other program waits instead of the
  running answer reading zeros, so the pass that is cut never computes on a damaged file.
- the SIGBUS net (native/mapped_file_net.inc, in the native library): where no lease can be
  had (NFS/FUSE, a file someone has open to write, another owner's file) or the library is
  built but leases are off, a read past the new end on any thread (ONNX Runtime's or the
  kernels') finds zero pages instead of ending the process; `cut_short()` after the pass names
  the file and the answer ends with the same one line. Any other SIGBUS still ends the process
  (it goes on to the handler installed before, e.g. faulthandler's). Without the native library
  (not built, CHATAPP_NATIVE_LIB=none) the files without a lease are only checked before each
  pass, and SIGBUS stays possible there.
Weighed and not taken: siglongjmp out of the fault (ONNX Runtime's own reads cannot be unwound)
and private copies of the weights (the memory the mapping saves: the 1.1B shape, 1 GB).
Their cost: a descriptor per file and one fcntl per file every POLL_S on a thread shared by
all models; nothing in the forward pass but an uncontended lock and one read of a counter.

SIGIO's default action ends the process, so leases are taken only once `install_signal()`
has run on the main thread (the command line does it first thing).
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import fcntl
import functools
import gc
import logging
import mmap
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chatapp.engine.errors import ModelError
from chatapp.folder_format.native_library import sigbus_net

log = logging.getLogger(__name__)

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


# ---- the mapped files kept from changing: read leases and the SIGBUS net --------------------

POLL_S = 0.05  # how soon a waiting writer is let through when no forward runs
_installed = False
_held: weakref.WeakSet[WeightLeases] = weakref.WeakSet()
_watcher: threading.Thread | None = None
_watcher_lock = threading.Lock()


def install_signal() -> bool:
    """Make SIGIO (a lease break's signal) harmless; main thread only. True when leases may
    be taken in this process."""
    global _installed
    if _installed:
        return True
    if not _LINUX or threading.current_thread() is not threading.main_thread():
        return False
    # The watcher does the work; the handler only keeps the default action (exit) away.
    signal.signal(signal.SIGIO, lambda _signum, _frame: None)
    # Restart a system call it lands in (this process's own write to a leased file waits in
    # one) instead of failing it with EINTR.
    signal.siginterrupt(signal.SIGIO, False)
    _installed = True
    return True


class WeightLeases:
    """Read leases on `files` while a model maps them; `running()` around each forward pass."""

    def __init__(self, files: Iterable[Path]) -> None:
        self._fds: dict[Path, int] = {}
        self._state = threading.Lock()
        self._passes = 0  # forward passes running now (slots run several at once)
        self.changing: Path | None = None  # the file another program opened to write
        files = tuple(Path(path) for path in files)
        self._net = _NetFiles(files)
        if not (_installed or install_signal()):
            return
        for path in files:
            self._take(Path(path))
        if self._fds:
            _held.add(self)
            _start_watcher()

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._fds)

    def _take(self, path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        try:
            _lease(fd)
        except OSError as exc:  # NFS, open to write elsewhere, not the owner: the net only
            log.info("no read lease on %s (%s); the SIGBUS net covers it", path, exc)
            os.close(fd)
            return
        self._fds[path] = fd

    @contextlib.contextmanager
    def running(self) -> Iterator[Path | None]:
        """Hold the leases for one forward pass (several may run at once: the server's slots
        wait for each other inside theirs); yields the file another program has begun to
        change (the caller refuses the run), else None. A break noticed here or by the watcher
        is let through as soon as no pass runs: at the end of the running one, since passes
        follow each other too closely for the watcher to find a gap."""
        with self._state:
            self._notice_break()
            if self.changing is not None and not self._passes:
                self.let_go()
            self._passes += 1
            changing = self.changing
        try:
            yield changing
        finally:
            with self._state:
                self._passes -= 1
                if self.changing is not None and not self._passes:
                    self.let_go()

    def cut_short(self) -> Path | None:
        """The first file a read found cut short since the model mapped it (the net gave it
        zeros), else None; ask after each pass."""
        return self._net.faulted()

    def poll(self) -> None:
        """Let go of every lease once one is being broken and no forward pass runs."""
        with self._state:
            if not self._fds or self._passes:
                return
            self._notice_break()
            if self.changing is not None:
                self.let_go()

    def _notice_break(self) -> None:
        """Note (in `changing`) the first file another program has begun to change."""
        if self.changing is not None or not self._fds:
            return
        for path, fd in self._fds.items():
            try:
                breaking = fcntl.fcntl(fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK
            except OSError:
                breaking = True
            if breaking:
                self.changing = path
                log.warning("%s is being changed by another program", path)
                return

    def let_go(self) -> None:
        # Each descriptor popped before it is closed: two callers never close one twice.
        while self._fds:
            try:
                _path, fd = self._fds.popitem()
            except KeyError:  # another caller took the last one
                break
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:
        # Under the lock: weak references are cleared only after a finalizer, so the watcher can
        # still reach this object through `_held` and let go beside it (seen in CI: "dictionary
        # changed size during iteration" here).
        state = getattr(self, "_state", None)
        if state is not None:
            with state:
                self.let_go()
        self._net.release()


def _lease(fd: int) -> None:
    """Take a read lease on `fd` (a test replaces this to play a file where none can be had)."""
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)


class _NetFiles:
    """`files` registered with the native SIGBUS net for as long as a session maps them."""

    def __init__(self, files: Iterable[Path]) -> None:
        self._lib = sigbus_net()
        self._known: dict[Path, tuple[int, int, int, int]] = {}  # major, minor, inode, faults
        if self._lib is None:
            return
        for path in files:
            try:
                st = os.stat(path)
            except OSError:
                continue
            key = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
            faults = self._lib.chatapp_sigbus_register(*key)
            if faults < 0:
                log.warning("too many weight files mapped: %s is not covered by the net", path)
                continue
            self._known[path] = (*key, faults)

    def faulted(self) -> Path | None:
        if self._lib is None:
            return None
        for path, (major, minor, inode, before) in self._known.items():
            if self._lib.chatapp_sigbus_faults(major, minor, inode) > before:
                return path
        return None

    def release(self) -> None:
        if self._lib is not None:
            for major, minor, inode, _ in self._known.values():
                self._lib.chatapp_sigbus_release(major, minor, inode)
        self._known.clear()


def _start_watcher() -> None:
    global _watcher
    with _watcher_lock:
        if _watcher is not None and _watcher.is_alive():
            return
        _watcher = threading.Thread(target=_watch, name="weight-file-leases", daemon=True)
        _watcher.start()


def _watch() -> None:
    """Poll every model's leases; ends when no model holds any (the next one starts it)."""
    global _watcher
    while True:
        time.sleep(POLL_S)
        with _watcher_lock:
            current = [leases for leases in list(_held) if leases.files]
            if not current:
                _watcher = None
                return
        for leases in current:
            leases.poll()


# ---- the weight files a session maps, checked before each run ------------------------------
# So that one changed on disk is refused instead of killing the process.
#
# ONNX Runtime maps a folder's external data (`model.onnx.data`: the GGUF's blocks for the native
# kernels, a packed copy's weights) instead of reading it. If another program cuts such a file
# short (a sync tool, a failed copy), the next read of a page past the new end raises SIGBUS and
# the window or server dies with no word. So each file's identity (device, inode), size and
# modification time are recorded when the session is made, and every forward checks them first:
# a few `stat` calls (microseconds) against a step of milliseconds. A changed file stops the run
# with one line naming it; opening the model again maps the file as it now is.


@dataclass(frozen=True)
class _Identity:
    device: int
    inode: int
    size: int
    mtime_ns: int


def _identity(path: Path) -> _Identity:
    st = os.stat(path)
    return _Identity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class MappedFilesChanged(ModelError):
    """A mapped weight file changed on disk after the model was loaded."""


class MappedFiles:
    """The identities of `files` now, and read leases on them (`WeightLeases`): `check`
    raises MappedFilesChanged once one differs; `in_use()` around a run also refuses it where
    another program has begun to change one, and keeps that program waiting until it ends, and
    ends it where a read found one cut short (the SIGBUS net gave zeros)."""

    def __init__(self, files: Iterable[Path], model_name: str) -> None:
        self.model_name = model_name
        self._known = {Path(f): _identity(Path(f)) for f in files}
        self._leases = WeightLeases(self._known)

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        with self._leases.running() as changing:
            if changing is not None:
                raise MappedFilesChanged(
                    f"{changing.name} of {self.model_name} is being changed by another program "
                    "(cut short or rewritten); restore it and open the model again."
                )
            self._refuse_cut()
            self.check()
            try:
                yield
            finally:  # a read past a cut end found zeros (the net): this pass is void
                self._refuse_cut()

    def _refuse_cut(self) -> None:
        cut = self._leases.cut_short()
        if cut is not None:
            raise MappedFilesChanged(
                f"{cut.name} of {self.model_name} was cut short by another program while the "
                "model read it; restore it and open the model again."
            )

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._known)

    def check(self) -> None:
        for path, known in self._known.items():
            try:
                changed = _identity(path) != known
            except OSError:
                changed = True
            if changed:
                raise MappedFilesChanged(
                    f"{path.name} of {self.model_name} changed on disk after the model was "
                    f"loaded (cut short, replaced or removed by another program); restore it "
                    "and open the model again."
                )
