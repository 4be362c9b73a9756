"""The GGUF blocks a native graph multiplies by are faulted in when the model loads (as
llama.cpp does), not by the first answer; blocks only gathered a row at a time stay lazy."""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import onnx
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.mapped_weights import MADV_POPULATE_READ, populate_mapped, release_mapped
from chatapp.engine.model_description import read_model
from chatapp.engine.native_kernels import library_path
from chatapp.folder_format.graph import all_nodes
from tests.engine.test_memory import with_external_data
from tests.engine.test_resident import mapped_rss
from tests.tiny_model import write_tiny_gguf

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise, /proc")
PAGE = mmap.PAGESIZE


@pytest.fixture(scope="module")
def populating(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skips where the kernel cannot populate a mapping (before Linux 5.14, some sandboxes):
    populate_mapped then only reads ahead, which no page count can show."""
    path = tmp_path_factory.mktemp("probe") / "probe.bin"
    path.write_bytes(b"\1" * PAGE)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY) as view:
        anchor = ctypes.c_char.from_buffer(view)  # the mapping's address, asked of the kernel
        supported = libc.madvise(ctypes.addressof(anchor), PAGE, MADV_POPULATE_READ) == 0
        del anchor
    if not supported:
        pytest.skip("this kernel has no MADV_POPULATE_READ (Linux 5.14+)")


@linux_only
def test_only_the_mappings_holding_a_span_are_populated(tmp_path: Path, populating: None) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(range(256)) * (16 << 12))  # 4 MiB
    with path.open("rb") as fh:
        first = mmap.mmap(fh.fileno(), 1 << 20, access=mmap.ACCESS_READ)  # bytes 0 .. 1 MiB
        second = mmap.mmap(fh.fileno(), 1 << 20, access=mmap.ACCESS_READ, offset=2 << 20)
        try:
            release_mapped([path])
            assert mapped_rss(path) < 100  # kB: nothing read yet
            assert populate_mapped([(path, 5000, 10)]) == 1 << 20  # in the first only
            assert 1000 <= mapped_rss(path) < 1100
            assert populate_mapped([(path, 1 << 20, PAGE)]) == 0  # between the two: none
            assert populate_mapped([(path, 0, 3 << 20)]) == 2 << 20  # overlaps both
            assert mapped_rss(path) >= 2000
            assert first[5000:5010] == bytes(range(136, 146))  # the file's bytes, unchanged
            assert second[:4] == bytes(range(4))
        finally:
            first.close()
            second.close()
    assert populate_mapped([]) == 0


@pytest.fixture(scope="module")
def untied_native(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gguf = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tied=False, seed=3)
    out = tmp_path_factory.mktemp("native") / "m"
    folder = convert_gguf(gguf, out, ConvertOptions(graph="native"))
    return with_external_data(folder, out.parent / "external")  # as a real model's are


@pytest.mark.skipif(library_path() is None, reason="native kernels not built")
def test_the_spans_are_the_multiplied_blocks_not_the_gathered_embedding(
    untied_native: Path,
) -> None:
    model = read_model(untied_native, None, "cpu")
    graph = onnx.load(str(untied_native / "model.onnx"), load_external_data=False)
    nodes = list(all_nodes(graph.graph))
    multiplied = {n.input[1] for n in nodes if n.op_type == "GgufMatMul"}
    gathered = {n.input[0] for n in nodes if n.op_type == "GgufGather"} - multiplied
    assert gathered  # untied: the embedding is only gathered
    offsets = {}
    for tensor in graph.graph.initializer:
        entries = {e.key: e.value for e in tensor.external_data}
        if "offset" in entries:
            offsets[tensor.name] = (int(entries["offset"]), int(entries["length"]))
    spans = {(o, n) for _, o, n in model.memory.block_spans}
    assert spans and spans == {offsets[name] for name in multiplied if name in offsets}
    assert gathered <= set(offsets)  # stored outside too, yet not a span
    assert not spans & {offsets[name] for name in gathered}
    assert {f for f, _, _ in model.memory.block_spans} == set(model.memory.mapped_files)


@linux_only
@pytest.mark.skipif(library_path() is None, reason="native kernels not built")
def test_a_loaded_native_model_holds_its_blocks_before_the_first_answer(
    untied_native: Path, populating: None
) -> None:
    engine = Engine(untied_native, threads=1)
    data = engine.memory.mapped_files[0]
    blocks = sum(n for _, _, n in engine.memory.block_spans)
    assert mapped_rss(data) * 1024 >= blocks  # resident now, without a run
    release_mapped([data])
    assert mapped_rss(data) * 1024 < blocks  # (the check above could fail)
