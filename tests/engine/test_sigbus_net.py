"""The native SIGBUS net for mapped weight files (native/mapped_file_net.inc, issue 48): a read
past the end of a registered file cut short finds zeros and is counted; every other SIGBUS
ends the process as before, through the handler installed before it (faulthandler's) or the
default action. Each case in a child process, since a failure here is a dead process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.folder_format.native_library import sigbus_net

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIGBUS net: Linux"),
    pytest.mark.skipif(sigbus_net() is None, reason="the native library is not built"),
]
ROOT = Path(__file__).resolve().parents[2]

# argv: the file, then words: faulthandler (enable it first, as `python -X faulthandler`,
# PYTHONFAULTHANDLER and pytest do), register (through WeightLeases, with no lease to be had),
# kill (a SIGBUS sent by kill, no fault).
CHILD = """
import faulthandler, mmap, os, signal, sys
from pathlib import Path
words = set(sys.argv[2:])
if "faulthandler" in words:
    faulthandler.enable()
from chatapp.engine import mapped_weights
from chatapp.folder_format.native_library import sigbus_net
mapped_weights._lease = lambda fd: (_ for _ in ()).throw(OSError(11, "no lease (test)"))
path = Path(sys.argv[1])
path.write_bytes(b"\\1" * (64 * 4096))
with open(path, "rb") as f:
    view = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
assert sigbus_net() is not None
leases = mapped_weights.WeightLeases([path]) if "register" in words else None
before = view[5 * 4096]
assert leases is None or leases.cut_short() is None
if "kill" in words:
    os.kill(os.getpid(), signal.SIGBUS)
os.truncate(path, 4096 + 100)
after = [view[5 * 4096], view[63 * 4096 + 7], view[4096 + 50]]
print("read", before, after, leases.cut_short().name if leases else None, flush=True)
"""


def run_child(tmp_path: Path, *words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "weights.data"), *words],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("words", [(), ("faulthandler",)])
def test_a_registered_file_cut_short_reads_zeros_and_is_named(
    tmp_path: Path, words: tuple[str, ...]
) -> None:
    done = run_child(tmp_path, "register", *words)
    assert done.returncode == 0, done.stderr[-2000:]
    # Past the cut: zeros; the page that still holds the file's bytes: as before.
    assert done.stdout.split("\n")[0] == "read 1 [0, 0, 1] weights.data", done.stdout
    assert "Fatal Python error" not in done.stderr


def test_a_sigbus_outside_registered_files_still_ends_the_process(tmp_path: Path) -> None:
    done = run_child(tmp_path)
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr[-2000:])
    assert "read" not in done.stdout


@pytest.mark.parametrize("words", [("faulthandler",), ("faulthandler", "register", "kill")])
def test_faulthandler_still_sees_the_faults_that_are_not_the_nets(
    tmp_path: Path, words: tuple[str, ...]
) -> None:
    """faulthandler enabled first (as pytest does): the net chains to it, so it still prints the
    Python stack of a foreign fault (and of a SIGBUS sent by kill) and the process ends."""
    done = run_child(tmp_path, *words)
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr[-2000:])
    assert "Fatal Python error: Bus error" in done.stderr
    assert "read" not in done.stdout


def test_a_sigbus_sent_by_kill_is_not_taken_for_a_cut_file(tmp_path: Path) -> None:
    done = run_child(tmp_path, "register", "kill")
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr[-2000:])


RACE = """
import ctypes, mmap, os, sys, threading
from pathlib import Path
from chatapp.engine import mapped_weights
mapped_weights._lease = lambda fd: (_ for _ in ()).throw(OSError(11, "no lease (test)"))
folder, rounds = Path(sys.argv[1]), int(sys.argv[2])
THREADS, PAGES = 4, 256
cut = 0
for r in range(rounds):
    path = folder / f"w{r}.data"
    path.write_bytes(b"\\1" * (PAGES * 4096))
    with open(path, "rb") as f:
        view = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    leases = mapped_weights.WeightLeases([path])
    line = next(l for l in open("/proc/self/maps") if l.rstrip().endswith(str(path)))
    start = int(line.split("-")[0], 16)
    barrier = threading.Barrier(THREADS + 1)
    def read():
        out = ctypes.create_string_buffer(4096)
        barrier.wait()
        for page in range(PAGES - 1, 0, -1):  # ctypes lets go of the GIL: reads at once
            ctypes.memmove(out, start + page * 4096, 4096)
    threads = [threading.Thread(target=read) for _ in range(THREADS)]
    for t in threads:
        t.start()
    os.truncate(path, 4096)
    barrier.wait()
    for t in threads:
        t.join()
    cut += leases.cut_short() is not None
    view.close()
    del leases
    path.unlink()
print("cut", cut, "of", rounds, flush=True)
"""


def test_threads_that_fault_in_one_mapping_at_once_all_read_on(tmp_path: Path) -> None:
    """ONNX Runtime's threads read one tensor's pages side by side: the first handler turns the
    mapping anonymous while the others are on their way in; they read again rather than being
    taken for a foreign fault (the first version of the net died here within 200 rounds)."""
    done = subprocess.run(
        [sys.executable, "-c", RACE, str(tmp_path), "150"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.strip() == "cut 150 of 150"
