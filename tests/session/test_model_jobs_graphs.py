"""The window's conversion job writes the graph(s) the window asks for (`--graph` of
`chatapp convert`), and a loaded model says which kernels run it."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from chatapp.convert.converter import NATIVE_MODEL_FILE
from chatapp.engine.devices import needs_native
from chatapp.folder_format.native_library import LIBRARY_ENV, usable_isa
from chatapp.session.model_jobs import ConvertRequest, convert_job
from tests.session.drive import drive


def test_a_conversion_for_another_device_writes_both_graphs(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    out = drive(convert_job(ConvertRequest(tiny_gguf, tmp_path / "m", "both"))).result
    assert not needs_native(out / "model.onnx") and needs_native(out / NATIVE_MODEL_FILE)


def test_auto_writes_the_stock_graph_without_the_library(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LIBRARY_ENV, "none")
    out = drive(convert_job(ConvertRequest(tiny_gguf, tmp_path / "m"))).result
    assert not needs_native(out / "model.onnx") and not (out / NATIVE_MODEL_FILE).exists()


@pytest.mark.skipif(usable_isa() is None, reason="native kernels not built here")
def test_auto_writes_the_native_graph_with_the_library(tiny_gguf: Path, tmp_path: Path) -> None:
    out = drive(convert_job(ConvertRequest(tiny_gguf, tmp_path / "m"))).result
    assert needs_native(out / "model.onnx")


def test_a_conversion_for_cuda_writes_standard_attention(tiny_gguf: Path, tmp_path: Path) -> None:
    """The window converts for CUDA with plain attention ops (no float32 GQA there)."""
    request = ConvertRequest(tiny_gguf, tmp_path / "m", "stock", "standard")
    out = drive(convert_job(request)).result
    ops = {n.op_type for n in onnx.load(out / "model.onnx", load_external_data=False).graph.node}
    assert "GroupQueryAttention" not in ops and "Softmax" in ops
