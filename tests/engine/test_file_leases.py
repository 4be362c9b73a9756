"""Read leases on mapped weight files (issue 48, cause 1): another program that truncates one
waits while a forward pass runs, is let through right after it, and the next pass is told."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from chatapp.engine.mapped_weights import POLL_S, WeightLeases, install_signal

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="leases: Linux")
SIZE = 1 << 20


def leased(path: Path) -> WeightLeases:
    path.write_bytes(b"w" * SIZE)
    assert install_signal()  # pytest runs tests on the main thread
    leases = WeightLeases([path])
    if not leases.files:
        pytest.skip("this file system gives no read lease")
    return leases


def truncating(path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import os; os.truncate({str(path)!r}, 0)"])


def test_a_writer_waits_for_the_running_pass_and_the_next_pass_is_told(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx.data"
    leases = leased(path)
    with leases.running() as changing:
        assert changing is None
        writer = truncating(path)
        time.sleep(max(0.5, 10 * POLL_S))
        assert writer.poll() is None  # still waiting: the pass reads the file whole
        assert path.stat().st_size == SIZE
    assert writer.wait(10) == 0  # let through once the pass ended
    assert path.stat().st_size == 0
    with leases.running() as changing:
        assert changing == path


@pytest.mark.parametrize("how", ["truncate", "open to write"])
def test_an_idle_model_lets_a_writer_through_at_once(tmp_path: Path, how: str) -> None:
    path = tmp_path / "model.onnx.data"
    leases = leased(path)
    code = (
        f"import os; os.truncate({str(path)!r}, 0)"
        if how == "truncate"
        else f"open({str(path)!r}, 'r+b').close()"
    )
    started = time.monotonic()
    assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0
    assert time.monotonic() - started < 5  # a poll away, not the kernel's 45 s
    with leases.running() as changing:
        assert changing == path


def test_reading_does_not_break_a_lease(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx.data"
    leases = leased(path)
    code = f"open({str(path)!r}, 'rb').read()"
    assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 0
    time.sleep(3 * POLL_S)
    with leases.running() as changing:
        assert changing is None
    assert leases.files == (path,)


def test_passes_run_together_and_the_writer_waits_for_the_last(tmp_path: Path) -> None:
    """The server's slots run passes at once, each waiting for the others inside its own."""
    path = tmp_path / "model.onnx.data"
    leases = leased(path)
    with leases.running() as first:
        with leases.running() as second:  # a second pass does not wait for the first
            assert first is None and second is None
            writer = truncating(path)
            time.sleep(max(0.5, 10 * POLL_S))
        time.sleep(max(0.3, 5 * POLL_S))
        assert writer.poll() is None  # the first pass still runs
    assert writer.wait(10) == 0
    with leases.running() as changing:
        assert changing == path


def test_letting_go_at_deletion_waits_for_the_watcher_and_closes_each_file_once(
    tmp_path: Path,
) -> None:
    """The watcher may poll a model's leases while its finalizer runs (weak references go only
    after it): the finalizer waits for the lock the watcher holds, then closes every file."""
    import threading

    path = tmp_path / "model.onnx.data"
    leases = leased(path)
    fds = list(leases._fds.values())
    finalizer = threading.Thread(target=leases.__del__)
    with leases._state:  # as the watcher's poll holds it
        finalizer.start()
        finalizer.join(timeout=0.2)
        assert finalizer.is_alive()  # waiting for the lock: it cannot end while we hold it
        assert leases.files  # nothing let go behind the holder's back
    finalizer.join()
    assert not leases.files and fds
    leases.let_go()  # a second caller finds nothing to close twice
