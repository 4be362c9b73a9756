"""The weight files a session maps, kept from changing under a running answer: their
identities checked before each run (`MappedFiles`), read leases so that no other program cuts
one short meanwhile, and the SIGBUS net behind them. No Qt. Leases and the net: Linux;
elsewhere the identity check alone.

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

import contextlib
import fcntl
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.errors import ModelError
from chatapp.folder_format.native_library import sigbus_net

log = logging.getLogger(__name__)

POLL_S = 0.05  # how soon a waiting writer is let through when no forward runs
_LINUX = sys.platform.startswith("linux")
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
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
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
    """The identities of `files` now, and read leases on them (engine/file_leases.py): `check`
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
            finally:  # a read past a cut end found zeros (file_leases.py): this pass is void
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
