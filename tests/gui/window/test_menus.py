"""The menu bar: what each menu holds, recent models, Help > Open log folder and About."""

from __future__ import annotations

from pathlib import Path

from chatapp.gui.chat.controller import State
from chatapp.gui.compare.feature import CompareFeature
from chatapp.gui.window.menus import RECENT_KEY, about_text


def _texts(menu) -> list[str]:
    return [a.text().replace("&", "") for a in menu.actions() if not a.isSeparator()]


def test_the_menus_and_their_shortcuts(make_window, tiny_model_dir: Path) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    menus = {a.text().replace("&", ""): a.menu() for a in window.menuBar().actions()}
    file_items = _texts(menus["File"])
    assert file_items[:5] == [
        "Open model folder…",
        "Open GGUF…",
        "Models…",
        "Get models…",
        "Recent models",
    ]
    assert "New chat" in file_items  # the remote server adds its actions before it
    assert _texts(menus["File"])[-1] == "Quit"
    assert _texts(menus["View"])[:2] == ["Chat", "Compare loops"]
    assert "Theme" in _texts(menus["View"])
    assert _texts(menus["Help"])[0] == "Open log folder"
    assert _texts(menus["Help"])[-1] == "About chatapp"
    assert window.menus.open_gguf_action.shortcut().toString() == "Ctrl+Shift+O"
    compare = window.feature(CompareFeature)
    assert compare is not None and compare.action.shortcut().toString() == "Ctrl+2"
    compare.action.trigger()
    assert window.tabs.currentIndex() == compare.tab
    window.show_chat_action.trigger()
    assert window.tabs.currentIndex() == 0


def test_opening_is_off_while_a_model_loads(make_window, tiny_model_dir: Path) -> None:
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    assert window.chat.controller.backend_session.state is State.LOADING
    menus = window.menus
    assert not menus.open_folder_action.isEnabled() and not menus.recent_menu.isEnabled()


def test_recent_models_lists_folders_that_still_exist(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    window.settings.setValue(RECENT_KEY, [str(tiny_model_dir), str(tmp_path / "gone")])
    window.menus.rebuild_recent_menu()
    actions = window.recent_menu.actions()
    assert [a.text() for a in actions] == [tiny_model_dir.name]
    assert actions[0].toolTip() == str(tiny_model_dir)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=60_000
    ):
        actions[0].trigger()
    window.settings.setValue(RECENT_KEY, [])
    window.menus.rebuild_recent_menu()
    assert [a.text() for a in window.recent_menu.actions()] == ["(none yet)"]
    assert not window.recent_menu.actions()[0].isEnabled()


def test_about_names_versions_and_model(make_window, tiny_model_dir: Path) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    text = about_text(window.chat)
    for needle in ("ONNX Runtime", "Qt", "PySide6", "layers", "KV layout", str(tiny_model_dir)):
        assert needle in text
    # The three loops, and only devices that started a session here (not every provider).
    assert "No cache, Naive and IO-Binding" in text and "Devices here" in text
    assert "ExecutionProvider" not in text


def test_help_opens_the_log_folder(make_window, tmp_path, monkeypatch) -> None:
    from chatapp.datadir import ENV_VAR

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "data"))
    window = make_window(["--model", str(tmp_path / "no-model")], wait=False)
    opened: list[Path] = []
    window.open_folder = lambda folder: opened.append(folder) or True
    window.open_log_action.trigger()
    assert opened == [tmp_path / "data" / "logs"] and opened[0].is_dir()
    window.open_folder = lambda folder: False  # no file manager: say where the log is
    window.open_log_action.trigger()
    assert str(tmp_path / "data" / "logs" / "chatapp.log") in window.banner.text()
