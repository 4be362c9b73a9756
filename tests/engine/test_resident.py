"""Dropping mapped weight pages: the memory goes, the bytes read back the same, the tokens too."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import pytest

from chatapp.engine import resident
from chatapp.engine.engine import Engine
from chatapp.engine.resident import (
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
        patch.setattr(resident, "_LIBC", None)  # nothing released anywhere
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
