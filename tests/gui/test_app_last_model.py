"""Startup reopens the model used last; one that no longer loads gives way to the default."""

from __future__ import annotations

from pathlib import Path

import pytest
import qasync

from chatapp.convert import default_model
from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.gui import app as gui_app
from chatapp.gui.common.load_memory import remember_last_model
from tests.gui.test_app import _run


def test_startup_reopens_the_last_model(qapp, make_window, tiny_model_dir: Path, tmp_path) -> None:
    window = make_window(["--model", str(tmp_path / "unused")])  # a window, no model
    remember_last_model(window.settings, tiny_model_dir, "model.onnx")
    args, _ = gui_app.parse_args([])
    assert gui_app.model_to_open(window, args) == (tiny_model_dir, "model.onnx")
    assert _run(qasync.QEventLoop(qapp), gui_app.startup(window, args)) is True
    assert window.chat.controller.backend_session.model.folder == tiny_model_dir
    # The command line still wins.
    args, _ = gui_app.parse_args(["--model", str(tmp_path / "other")])
    assert gui_app.model_to_open(window, args) == (tmp_path / "other", None)


def test_a_last_model_that_fails_gives_way_to_the_default(
    qapp, make_window, tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setattr(default_model, "bundled_gguf", lambda: tiny_gguf)
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not a graph")
    window = make_window(["--model", str(tmp_path / "unused")])
    remember_last_model(window.settings, broken, "")
    args, _ = gui_app.parse_args([])
    assert _run(qasync.QEventLoop(qapp), gui_app.startup(window, args)) is True
    folder = tmp_path / "data" / "models" / default_model.FOLDER_NAME
    assert window.chat.controller.backend_session.model.folder == folder
