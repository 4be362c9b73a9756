"""Dropping mapped weight pages: the memory goes, the bytes read back the same, the tokens too."""

from __future__ import annotations

import ctypes
import mmap
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chatapp.engine import mapped_weights
from chatapp.engine.engine import Engine
from chatapp.engine.mapped_weights import (
    MappedPages,
    release_mapped,
    released_while_loading,
    resident_memory,
)
from chatapp.engine.sampling import SamplingSettings
from tests.engine.test_memory import with_external_data

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise, /proc")


def mapped_rss(path: Path) -> int:
    """Resident kB of the mappings of `path`."""
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head, _, rest = line.partition(" ")
        if "-" in head and not head.endswith(":"):
            current = rest.rstrip().endswith(str(path))
        elif head == "Rss:" and current:
            total += int(rest.split()[0])
    return total


@linux_only
def test_released_pages_leave_and_read_back_the_same(tmp_path: Path) -> None:
    data = bytes(range(256)) * (16 << 12)  # 4 MiB
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
        assert view[:] == data  # every page read: resident
        assert mapped_rss(path) >= 4000
        assert release_mapped([path]) >= len(data)
        assert mapped_rss(path) < 100
        assert view[:] == data  # faulted back from the file, byte for byte


@linux_only
def test_a_mapping_with_written_pages_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * (1 << 20))
    with path.open("r+b") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) as view:
        view[:5] = b"dirty"  # a private copy of that page: dropping it would lose the write
        assert release_mapped([path]) == 0
        assert view[:5] == b"dirty"


def test_nothing_is_released_where_nothing_is_named(tmp_path: Path) -> None:
    assert release_mapped([]) == 0
    with released_while_loading([]):
        pass


def greedy(n: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)


@linux_only
def test_tokens_stay_the_same_when_weight_pages_are_dropped_between_steps(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both loops, released while loading (what Engine does) and again before every step:
    the same greedy tokens as a model whose pages were never dropped."""
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    prompt = list(range(3, 40))
    kept = []
    with monkeypatch.context() as patch:
        patch.setattr(mapped_weights, "_LIBC", None)  # nothing released anywhere
        plain = Engine(folder, threads=1, max_context=128)
        for mode in ("naive", "iobinding"):
            kept.append(plain.generate_ids(prompt, greedy(24), mode, ignore_eos=True).run())
    assert kept[0].token_ids == kept[1].token_ids  # both loops agree
    engine = Engine(folder, threads=1, max_context=128)
    files = engine.memory.mapped_files
    assert files
    for mode, reference in zip(("naive", "iobinding"), kept, strict=True):
        generation = engine.generate_ids(prompt, greedy(24), mode, ignore_eos=True)
        tokens = []
        for event in generation:
            release_mapped(files)
            if not event.tail:  # a last event may carry held-back text, no token
                tokens.append(event.token_id)
        assert tokens == reference.token_ids


@linux_only
def test_resident_memory_reports_this_process() -> None:
    found = resident_memory()
    assert found["peak"] >= found["rss"] > 0
    assert found["rss"] >= found["anon"] > 0 and found["file"] > 0


@linux_only
def test_mapped_pages_find_the_mappings_once_and_skip_ranges_that_are_gone(
    tmp_path: Path,
) -> None:
    data = bytes(range(256)) * (8 << 12)  # 2 MiB
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    pages = MappedPages([path])
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
        for _ in range(2):
            assert view[:] == data
            assert pages.release() >= len(data)
            assert mapped_rss(path) < 100
        assert view[:] == data
    assert pages.release() == 0  # unmapped: its range is not touched again


# ---- never advise memory the app does not own (issue 48, cause 6) -----------------------------
class Advices:
    """Every madvise the module gives (address, length, advice), passed on to the real one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.given: list[tuple[int, int, int]] = []
        libc = mapped_weights._LIBC
        assert libc is not None
        real = libc.madvise

        class Recording:
            def __getattr__(self, name: str) -> object:
                return getattr(libc, name)

            def madvise(_self, start: int, length: int, advice: int) -> int:
                self.given.append((start, length, advice))
                return int(real(start, length, advice))

        monkeypatch.setattr(mapped_weights, "_LIBC", Recording())

    def kinds(self) -> set[int]:
        return {advice for _, _, advice in self.given}


@linux_only
def test_while_a_session_is_made_pages_are_only_reclaimed_never_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ONNX Runtime maps and unmaps while it loads: a range may hold the heap by the time the
    advice arrives. During the load only MADV_PAGEOUT (contents kept), after it DONTNEED."""
    if not mapped_weights._kernel_takes(mapped_weights.MADV_PAGEOUT):
        pytest.skip("this kernel has no MADV_PAGEOUT (Linux 5.4+)")
    data = bytes(range(256)) * (16 << 12)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    monkeypatch.setattr(mapped_weights, "RELEASE_INTERVAL_S", 0.001)
    advices = Advices(monkeypatch)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
        with released_while_loading([path]):
            deadline = time.monotonic() + 10
            while not advices.given and time.monotonic() < deadline:
                assert view[:] == data  # read, as a session packing its weights does
                time.sleep(0.002)
            during = advices.kinds()
            # Another thread's release must wait: the load's mappings are changing.
            answers: list[int] = []
            other = threading.Thread(target=lambda: answers.append(release_mapped([path])))
            other.start()
            other.join(10)
            assert answers == [0]
        assert during == {mapped_weights.MADV_PAGEOUT}
        assert advices.given[-1][2] == mapped_weights.MADV_DONTNEED  # once the session holds them
        assert view[:] == data


@linux_only
def test_the_reclaim_used_while_loading_keeps_memory_that_is_not_the_files() -> None:
    """The advice a load gives may land on a range the heap took over: it must keep its bytes
    (MADV_DONTNEED would have zeroed them: the heap corruption of issue 48)."""
    if not mapped_weights._kernel_takes(mapped_weights.MADV_PAGEOUT):
        pytest.skip("this kernel has no MADV_PAGEOUT (Linux 5.4+)")
    libc = mapped_weights._LIBC
    assert libc is not None
    size = 64 * mmap.PAGESIZE
    heap_like = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # as malloc's
    pattern = bytes(range(251)) * (size // 251) + bytes(size % 251)
    heap_like[:] = pattern
    view = ctypes.c_char.from_buffer(heap_like)
    try:
        address = ctypes.addressof(view)
        assert libc.madvise(address, size, mapped_weights.MADV_PAGEOUT) == 0
        assert heap_like[:] == pattern
        libc.madvise(address, size, mapped_weights.MADV_DONTNEED)  # what the old release gave
        assert heap_like[:] != pattern  # zeroed: why it must never reach someone's memory
    finally:
        del view
        heap_like.close()


@linux_only
def test_no_release_runs_while_a_session_is_dropped(tmp_path: Path) -> None:
    data = bytes(range(256)) * (4 << 12)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    pages = MappedPages([path])
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as view:
        assert view[:] == data
        released: list[int] = []
        with mapped_weights.dropping_sessions():

            def release_both() -> None:
                released.extend([release_mapped([path]), pages.release()])

            other = threading.Thread(target=release_both)
            other.start()
            other.join(10)
        assert released == [0, 0]  # skipped, not waited for
        assert release_mapped([path]) >= len(data)  # and given once the drop is over


STRESS_LOADS = """
import gc, sys
from chatapp.engine import mapped_weights
from chatapp.engine.engine import Engine
from chatapp.engine.sampling import SamplingSettings
mapped_weights.RELEASE_INTERVAL_S = 0.0005  # as often as it can: the race had a window of ms
first = None
for _ in range(int(sys.argv[2])):
    engine = Engine(sys.argv[1], threads=1, max_context=64)
    settings = SamplingSettings(temperature=0.0, max_new_tokens=4)
    tokens = engine.generate_ids([3, 4, 5], settings, ignore_eos=True).run().token_ids
    assert tokens == (first := first or tokens), (tokens, first)  # the weights read intact
    del engine
    gc.collect()
print("loaded", sys.argv[2])
"""


@linux_only
def test_many_parallel_loads_of_an_external_weights_folder_never_crash(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The issue's case: an onnx-community folder (`onnx/model.onnx` + `onnx/model.onnx_data`)
    loaded again and again in parallel processes, pages released as often as can be."""
    from tests.engine.test_packed_cache import onnx_community_layout

    folder = onnx_community_layout(tiny_model_dir, tmp_path / "community")
    script = tmp_path / "loads.py"
    script.write_text(STRESS_LOADS)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root), "CHATAPP_PACKED_CACHE": "0"}
    loads, processes = 15, 4
    children = [
        subprocess.Popen(
            [sys.executable, str(script), str(folder), str(loads)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for child in children:
        try:
            out, err = child.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
        assert child.returncode == 0, err[-2000:]
        assert out.strip() == f"loaded {loads}"
