"""The window converts into the graph its device runs: auto on the CPU, both graphs elsewhere."""

from __future__ import annotations

from PySide6.QtCore import QSettings

from chatapp.gui.common.load_memory import last_model
from chatapp.gui.models.conversion import graph_for


def test_the_cpu_gets_auto_and_another_device_both_graphs() -> None:
    assert graph_for("cpu") == "auto"
    for device in ("cuda", "dml", "webgpu", "coreml"):
        assert graph_for(device) == "both"


def test_the_model_line_says_which_kernels_run(make_window, tiny_model_dir, tmp_path) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.model_label.text().endswith("· ONNX Runtime kernels")  # a stock graph


def test_a_named_graph_is_remembered_and_a_default_one_is_not(
    make_window, tiny_model_dir, settings_file
) -> None:
    for argv, graph in (([], None), (["--onnx-file", "model.onnx"], "model.onnx")):
        window = make_window(["--model", str(tiny_model_dir), *argv])
        window.close()
        saved = QSettings(str(settings_file), QSettings.Format.IniFormat)
        assert last_model(saved) == (tiny_model_dir, graph)
