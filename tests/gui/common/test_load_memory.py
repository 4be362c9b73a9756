"""The load times kept, per model folder, graph and device; a damaged entry is forgotten."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from chatapp.gui.common.load_memory import (
    KEEP_LOAD_TIMES,
    LOAD_SECONDS_KEY,
    last_load_seconds,
    load_key,
    remember_load_seconds,
)


def test_load_times_are_kept_per_model_graph_and_device(tmp_path: Path) -> None:
    settings = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    cpu = load_key(tmp_path / "m", None, "cpu")
    assert last_load_seconds(settings, cpu) is None
    remember_load_seconds(settings, cpu, 6.234)
    assert last_load_seconds(settings, cpu) == 6.23
    assert last_load_seconds(settings, load_key(tmp_path / "m", "model_q4.onnx", "cpu")) is None
    assert last_load_seconds(settings, load_key(tmp_path / "m", None, "webgpu")) is None
    for n in range(KEEP_LOAD_TIMES):  # the oldest is forgotten first
        remember_load_seconds(settings, load_key(tmp_path / f"other{n}", None, "cpu"), 1.0)
    assert last_load_seconds(settings, cpu) is None
    settings.setValue(LOAD_SECONDS_KEY, "{not json")  # damaged: no estimate, no error
    assert last_load_seconds(settings, cpu) is None
    remember_load_seconds(settings, cpu, 2.0)
    assert last_load_seconds(settings, cpu) == 2.0
