"""View menu: the theme (System / Light / Dark) and the panes beside the chat, remembered;
small and scaled screens open a window that fits with the input box on the screen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from chatapp.gui.common.theme import apply_theme, colors
from chatapp.gui.compare.feature import CompareFeature
from chatapp.gui.window.view_options import LIST_KEY, SIDE_KEY

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_theme(qapp) -> Iterator[None]:
    yield
    apply_theme("system")


def test_theme_choice_applies_and_is_remembered(
    make_window, tiny_model_dir: Path, settings_file: Path, restore_theme
) -> None:
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    options = window.view_options
    assert options.theme_actions["system"].isChecked()
    options.theme_actions["dark"].trigger()
    assert colors().dark and options.theme_actions["dark"].isChecked()
    window.shutdown()
    assert QSettings(str(settings_file), QSettings.Format.IniFormat).value("view/theme") == "dark"
    apply_theme("system")
    again = make_window(["--model", str(tiny_model_dir)], wait=False)
    assert again.view_options.theme_actions["dark"].isChecked() and colors().dark
    again.view_options.theme_actions["light"].trigger()
    assert not colors().dark


def test_panes_hide_and_show_from_the_view_menu(
    qtbot, make_window, tiny_model_dir: Path, settings_file: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    window.show()
    qtbot.waitExposed(window)
    options = window.view_options
    assert options.list_action.shortcut().toString() == "Ctrl+B"
    assert options.side_action.shortcut().toString() == "Ctrl+Alt+B"
    assert window.side_scroll.isVisible() and window.conversation_list.isVisible()
    options.side_action.trigger()
    options.list_action.trigger()
    assert not window.side_scroll.isVisible() and not window.conversation_list.isVisible()
    assert window.chat.chat_view.prompt_edit.isVisible()
    compare = window.feature(CompareFeature)
    assert compare is not None
    compare.action.trigger()
    window.show_chat_action.trigger()
    assert not window.side_scroll.isVisible()  # coming back to the chat keeps the choice
    saved = QSettings(str(settings_file), QSettings.Format.IniFormat)
    assert saved.value(SIDE_KEY) in (False, "false") and saved.value(LIST_KEY) in (False, "false")
    options.side_action.trigger()
    assert window.side_scroll.isVisible()


PROBE = """
import json, sys
from PySide6.QtCore import QPoint, QTimer
from chatapp.gui.app import application, build_window
app = application()
w = build_window(["--model", sys.argv[1]])
w.show()
def report():
    area = w.screen().availableGeometry()
    p = w.chat.chat_view.prompt_edit
    top_left = p.mapToGlobal(QPoint(0, 0))
    print(json.dumps({
        "area": [area.x(), area.y(), area.width(), area.height()],
        "frame": [w.frameGeometry().x(), w.frameGeometry().y(), w.frameGeometry().width(),
                  w.frameGeometry().height()],
        "prompt": [top_left.x(), top_left.y(), p.width(), p.height()],
        "prompt_visible": p.isVisible(),
        "side": w.side_scroll.isVisible(),
    }))
    w.close()
    app.quit()
QTimer.singleShot(300, report)
app.exec()
"""


def offscreen_screen(folder: Path, width: int, height: int) -> Path:
    """A config file for Qt's offscreen platform: one screen of `width` x `height` pixels."""
    screen = {
        "synchronousWindowSystemEvents": False,
        "windowFrameMargins": False,
        "screens": [
            {"name": "s", "x": 0, "y": 0, "width": width, "height": height, "dpr": 1,
             "logicalDpi": 96, "logicalBaseDpi": 96}
        ],
    }  # fmt: skip
    config = folder / "screen.json"
    config.write_text(json.dumps(screen))
    return config


@pytest.mark.parametrize(
    ("width", "height", "scale"), [(800, 500, "1"), (1366, 768, "2")], ids=["800x500", "200%"]
)
def test_small_and_scaled_screens_reach_the_input_box(
    tmp_path: Path, tiny_model_dir: Path, width: int, height: int, scale: str
) -> None:
    config = offscreen_screen(tmp_path, width, height)
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": f"offscreen:configfile={config}",
        "QT_SCALE_FACTOR": scale,
        "CHATAPP_DATA_DIR": str(tmp_path / "data"),
    }
    env.pop("CHATAPP_SETTINGS", None)  # fresh settings beside the fresh data
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tiny_model_dir)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    ax, ay, aw, ah = got["area"]
    fx, fy, fw, fh = got["frame"]
    assert (ax, ay) <= (fx, fy) and fx + fw <= ax + aw and fy + fh <= ay + ah, got
    px, py, pw, ph = got["prompt"]
    assert got["prompt_visible"] and pw >= 200 and ph >= 40
    assert ax <= px and px + pw <= ax + aw and ay <= py and py + ph <= ay + ah, got
    assert (tmp_path / "data" / "chatapp.ini").is_file()
    if scale == "2":
        assert not got["side"]  # 683 px wide: the chat gets the width


def test_both_panes_fit_an_800_pixel_screen(qtbot, make_window, tiny_model_dir: Path) -> None:
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    window.show()
    qtbot.waitExposed(window)
    assert window.side_scroll.isVisible() and window.conversation_list.isVisible()
    # The comparison's controls do not widen the chat page: the window can be that narrow.
    assert window.minimumSizeHint().width() <= 800


def test_a_pane_shown_near_the_edge_keeps_the_window_on_the_screen(
    qtbot, make_window, tiny_model_dir: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    window.show()
    qtbot.waitExposed(window)
    area = window.screen().availableGeometry()
    window.move(area.right() - window.width() // 2, area.top())  # half off the right edge
    assert not area.contains(window.frameGeometry())
    window.view_options.side_action.trigger()  # a pane hidden or shown: back on the screen
    qtbot.waitUntil(lambda: area.contains(window.frameGeometry()), timeout=2000)
