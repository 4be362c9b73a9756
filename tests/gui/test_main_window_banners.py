"""Each banner follows its cause: a failed import, a refused tools file, an export that could
not be written or a log folder that could not be made goes once the same thing succeeds, and
a message about something else that replaced it stays (issue 48)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatapp.gui.chat.controller import State
from chatapp.gui.history.ui import HistoryUi
from chatapp.gui.main_window import MainWindow
from chatapp.gui.window import menus as menus_module
from tests.gui.conftest import greedy, send_and_wait, set_sampling
from tests.weather_tool import WEATHER


def loaded(make_window, model: Path) -> MainWindow:
    window = make_window(["--model", str(model)])
    assert window.chat.controller.backend_session.state is State.READY
    set_sampling(window, greedy(4))
    return window


def test_the_banner_goes_only_with_its_own_cause(qtbot) -> None:
    from chatapp.gui.common.banner import MessageBanner

    banner = MessageBanner()
    qtbot.addWidget(banner)
    banner.show_message("Could not import a.json: not JSON.", "error", cause="import")
    banner.dismiss_cause("tools")
    assert banner.isVisible()
    banner.dismiss_cause("import")
    assert not banner.isVisible()
    banner.show_message("Could not import a.json: not JSON.", "error", cause="import")
    banner.show_message("The history is read-only.", "warning")  # another cause replaced it
    banner.dismiss_cause("import")
    assert banner.isVisible() and banner.text() == "The history is read-only."
    banner.dismiss_cause("")
    assert banner.isVisible()


def test_a_good_import_clears_a_failed_one(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    window = loaded(make_window, tiny_model_dir)
    ui = window.feature(HistoryUi)
    send_and_wait(qtbot, window, "keep me")
    good = tmp_path / "good.json"
    ui.ask_save_path = lambda *_args: str(good)
    assert ui.export_current("json") == good
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"[" * 50_000)
    ui.ask_open_path = lambda *_args: str(bad)
    assert ui.import_conversation() is None
    assert window.banner.isVisible() and window.banner.text().startswith("Could not import bad")
    ui.ask_open_path = lambda *_args: str(good)
    assert ui.import_conversation() is not None
    assert not window.banner.isVisible()
    # A failed import, then another message: a good import leaves that one.
    ui.ask_open_path = lambda *_args: str(bad)
    ui.import_conversation()
    window.show_message("Something else happened.", "warning")
    ui.ask_open_path = lambda *_args: str(good)
    assert ui.import_conversation() is not None
    assert window.banner.isVisible() and window.banner.text() == "Something else happened."


def test_a_good_export_clears_a_failed_one(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    window = loaded(make_window, tiny_model_dir)
    ui = window.feature(HistoryUi)
    send_and_wait(qtbot, window, "export me")
    ui.ask_save_path = lambda *_args: str(tmp_path / "no-such-folder" / "chat.json")
    assert ui.export_current("json") is None
    assert window.banner.text().startswith("Could not write")
    ui.ask_save_path = lambda *_args: str(tmp_path / "chat.json")
    assert ui.export_current("json") == tmp_path / "chat.json"
    assert not window.banner.isVisible()
    assert json.loads((tmp_path / "chat.json").read_text())["format"] == "chatapp-conversation"


def test_a_good_tools_file_clears_a_refused_one(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("llguidance", reason="tool calling needs llguidance")
    window = loaded(make_window, tiny_model_dir)
    tools = window.chat.side_panel.sampling_box.tools
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert not tools.load_file(broken)
    assert window.banner.isVisible() and window.banner.text().startswith("The tools were not")
    good = tmp_path / "weather.json"
    good.write_text(json.dumps([WEATHER]))
    assert tools.load_file(good)
    assert not window.banner.isVisible()


def test_the_log_folder_message_goes_once_it_opens(
    make_window, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window(["--model", str(tmp_path / "unused")])
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setattr(menus_module, "logs_dir", lambda: blocked / "logs")
    window.menus._on_open_log_folder()
    assert window.banner.text().startswith("Could not create the log folder")
    monkeypatch.setattr(menus_module, "logs_dir", lambda: tmp_path / "logs")
    window.open_folder = lambda _folder: True  # type: ignore[method-assign]
    window.menus._on_open_log_folder()
    assert not window.banner.isVisible()
