"""Startup: command line, build_window, and the qasync startup coroutine (first-run prepare)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import qasync
from PySide6.QtWidgets import QProgressDialog

from chatapp import cli
from chatapp.convert import default_model
from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.gui import app as gui_app
from chatapp.gui.chat.controller import State
from tests.gui.event_loop_gaps import GapRecorder


def test_command_line_without_subcommand_starts_the_gui(monkeypatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(gui_app, "main", lambda argv: seen.append(argv) or 0)
    assert cli.main(["--model", "/some/dir", "--device", "cpu", "--mode", "naive"]) == 0
    assert seen == [["--model", "/some/dir", "--device", "cpu", "--mode", "naive"]]


def test_parse_args_keeps_qt_options_for_qt() -> None:
    args, rest = gui_app.parse_args(["--mode", "naive", "-style", "fusion"])
    assert args.mode == "naive" and args.model is None and args.device is None
    assert rest == ["-style", "fusion"]
    with pytest.raises(SystemExit):
        gui_app.parse_args(["--mode", "fast"])


def test_onnx_file_picks_the_graph(make_window) -> None:
    folder = Path(__file__).resolve().parent.parent / "fixtures" / "onnx_folders"
    argv = ["--model", str(folder / "onnx-community-llama"), "--onnx-file", "onnx/model_q4.onnx"]
    window = make_window(argv)
    assert window.chat.controller.backend_session.state is State.READY
    assert window.chat.controller.backend_session.model.onnx_file == "onnx/model_q4.onnx"
    assert (
        window.chat.loading.onnx_file == "onnx/model_q4.onnx"
    )  # kept when a device change reloads


def test_build_window_preselects_mode_and_loads(make_window, tiny_model_dir) -> None:
    window = make_window(["--model", str(tiny_model_dir), "--mode", "naive"], wait=False)
    assert window.isVisible()
    assert (
        window.chat.controller.backend_session.state is State.LOADING
    )  # returns at once, the worker loads
    assert window.chat.side_panel.mode() == "naive"


def _run(loop: qasync.QEventLoop, coro):
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def test_first_run_prepares_the_default_model_without_freezing(
    qapp, make_window, tiny_gguf: Path, tmp_path: Path, monkeypatch
) -> None:
    """`chatapp` with no model: the startup coroutine converts the bundled GGUF (here the tiny
    one) with a progress dialog, then loads it. A 10 ms timer keeps ticking meanwhile."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setattr(default_model, "bundled_gguf", lambda: tiny_gguf)
    window = make_window(["--model", str(tmp_path / "unused")])  # a window, no model
    args, _ = gui_app.parse_args([])

    dialogs: set[str] = set()
    gaps = GapRecorder()

    def see_dialog() -> None:
        dialog = window.findChild(QProgressDialog, "prepareProgressDialog")
        if dialog is not None and dialog.isVisible():
            dialogs.add(" ".join(dialog.labelText().split()))  # its lines wrapped to fit

    gaps.timer.timeout.connect(see_dialog)
    gaps.start()
    loop = qasync.QEventLoop(qapp)
    try:
        assert _run(loop, gui_app.startup(window, args)) is True
    finally:
        gaps.stop()
    folder = tmp_path / "data" / "models" / default_model.FOLDER_NAME
    assert window.chat.controller.backend_session.model.folder == folder
    assert window.chat.controller.backend_session.state is State.READY
    assert any("first run" in text for text in dialogs)
    assert len(gaps.ticks) >= 3 and max(gaps.app_gaps_ms()) < 500, gaps.describe()

    # A second start finds the prepared copy and opens it without converting again.
    dialogs.clear()
    second = make_window(["--model", str(tmp_path / "unused")])
    loop = qasync.QEventLoop(qapp)
    assert _run(loop, gui_app.startup(second, args)) is True
    assert second.chat.controller.backend_session.model.folder == folder
    assert second.findChild(QProgressDialog, "prepareProgressDialog") is None
