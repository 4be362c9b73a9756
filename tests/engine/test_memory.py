"""The memory estimate read from a folder's files, and the refusal of a model that won't fit."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
import pytest

from chatapp import system_memory
from chatapp.engine import model_description
from chatapp.engine.engine import Engine
from chatapp.engine.model_description import (
    RUNTIME_OVERHEAD,
    MemoryRefusal,
    check_memory,
    estimate_memory,
    packed_bytes,
    read_model_folder,
)
from chatapp.engine.model_folder.read import load_onnx_graph
from chatapp.units import fmt_bytes


def with_external_data(folder: Path, out: Path) -> Path:
    """A copy of `folder` whose weights live in model.onnx.data, as big models' do."""
    shutil.copytree(folder, out)
    proto = onnx.load(str(out / "model.onnx"))
    onnx.save_model(
        proto,
        str(out / "model.onnx"),
        save_as_external_data=True,
        location="model.onnx.data",
        size_threshold=4096,  # shape constants stay in the graph, where shape inference reads them
    )
    return out


def test_the_estimate_counts_the_weights_once_their_packed_copies_and_the_kv(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    read = read_model_folder(folder)
    info = read.info
    estimate = estimate_memory(read, 300)
    packed, replaced = packed_bytes(load_onnx_graph(info.onnx_path))
    on_disk = (folder / "model.onnx").stat().st_size + (folder / "model.onnx.data").stat().st_size
    assert estimate.packed == packed > 0
    assert 0 < replaced < on_disk
    assert estimate.weights == on_disk - replaced  # a packed copy stands in for its original
    assert estimate.kv == info.kv_bytes_per_token() * 300 and estimate.context == 300
    tokenizer = 4 * (folder / "tokenizer.json").stat().st_size
    assert estimate.tokenizer == tokenizer > 0  # what the loaded tokenizer keeps, about
    held = on_disk - replaced + packed + estimate.kv + tokenizer
    assert estimate.total == held + RUNTIME_OVERHEAD
    assert f"tokenizer {fmt_bytes(tokenizer)}" in estimate.parts()
    assert estimate.mapped_files == ((folder / "model.onnx.data").resolve(),)


def test_each_kernel_packs_its_own_copy(tiny_model_dir: Path) -> None:
    """The graph runs its projections on two kernels (prompts, decode steps): the int8 one's
    copy carries a float scale and block sum per block of 32 beside the 4-bit codes."""
    proto = load_onnx_graph(tiny_model_dir / "model.onnx")
    packed, replaced = packed_bytes(proto)
    nodes = [n for n in _all(proto.graph) if n.op_type == "MatMulNBits"]
    levels = {
        onnx.helper.get_attribute_value(a)
        for n in nodes
        for a in n.attribute
        if a.name == "accuracy_level"
    }
    assert levels == {0, 4}
    assert packed > replaced  # two copies of most weights, each about the original's size


def _all(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    from chatapp.folder_format.graph import all_nodes

    return list(all_nodes(graph))


def test_a_model_that_does_not_fit_is_refused_before_loading(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_description, "available_memory", lambda: 50_000_000)
    with pytest.raises(MemoryRefusal) as refused:
        Engine(tiny_model_dir, threads=1, max_context=64)
    message = str(refused.value)
    assert ". " not in message and message.endswith("smaller model.")  # one sentence
    assert "needs about 200." in message and "but 50.0 MB are free" in message
    assert "KV cache for 64 tokens" in message


def test_memory_freed_by_closing_the_current_model_counts(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    estimate = estimate_memory(read_model_folder(tiny_model_dir), 64)
    monkeypatch.setattr(model_description, "available_memory", lambda: estimate.total - 1000)
    with pytest.raises(MemoryRefusal):
        check_memory(estimate, "tiny")
    check_memory(estimate, "tiny", freed=1000)  # fits once the current model is closed


def test_without_an_available_figure_the_whole_memory_is_the_limit(
    monkeypatch: pytest.MonkeyPatch, tiny_model_dir: Path
) -> None:
    estimate = estimate_memory(read_model_folder(tiny_model_dir), 64)
    monkeypatch.setattr(model_description, "available_memory", lambda: None)
    monkeypatch.setattr(model_description, "physical_memory", lambda: estimate.total // 2)
    with pytest.raises(MemoryRefusal, match="is all this computer has"):
        check_memory(estimate, "tiny")
    monkeypatch.setattr(model_description, "physical_memory", lambda: None)
    check_memory(estimate, "tiny")  # nothing known: not refused


def test_available_memory_is_read_where_the_platform_says() -> None:
    available = system_memory.available_memory()
    total = system_memory.physical_memory()
    assert total is not None and total > 0
    if available is not None:
        assert 0 < available <= total
