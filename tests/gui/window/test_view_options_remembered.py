"""Pane widths and a window size remembered on a large screen, opened on a small one; and the
side panel at 1366x768, which fits without scrolling. Each run is a fresh process on a screen
of the test's size (Qt's offscreen platform), with one data folder between runs as a person's
settings are (tests/gui/window/pane_probe.py does the runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from chatapp.gui.common.geometry import CHAT_MIN_WIDTH
from tests.gui.window.test_view_options import offscreen_screen

ROOT = Path(__file__).resolve().parents[3]


def _run(tmp_path: Path, data: Path, model: Path, phase: str, size: tuple[int, int]) -> Any:
    screens = tmp_path / f"{size[0]}x{size[1]}"
    screens.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": f"offscreen:configfile={offscreen_screen(screens, *size)}",
        "CHATAPP_DATA_DIR": str(data),
    }
    env.pop("CHATAPP_SETTINGS", None)
    env.pop("QT_SCALE_FACTOR", None)
    out = subprocess.run(
        [sys.executable, "-m", "tests.gui.window.pane_probe", str(model), phase],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def _data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    # Both panes open, as a person who opened them (a first start on a small screen hides them).
    (data / "chatapp.ini").write_text("[view]\nconversation_list=true\nside_panel=true\n")
    return data


def test_panes_remembered_at_1920x1080_open_usable_at_800x500(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    data = _data(tmp_path)
    left = _run(tmp_path, data, tiny_model_dir, "leave", (1920, 1080))
    assert left["sizes"][0] >= 400 and left["sizes"][2] >= 400, left  # both panes wide
    settings = (data / "chatapp.ini").read_text()
    assert "geometry=" in settings and "splitter=" in settings, settings

    got = _run(tmp_path, data, tiny_model_dir, "open", (800, 500))
    # The whole window on the screen, no larger than it.
    assert got["on_screen"], got
    assert got["frame"][2] <= 800 and got["frame"][3] <= 500, got
    # The chat is the widest pane and usable; the panes gave way, none to nothing.
    assert got["chat"][2] >= CHAT_MIN_WIDTH - 16, got
    assert got["chat"][2] >= got["side"] - 16 and got["chat"][2] >= got["list"], got
    assert got["side"] >= got["side_min"] > 0, got  # the side panel stays, at its narrowest
    assert got["prompt"][2] >= 180, got
    # The input hint is whole: wrapped into the height it has, not a letter a line.
    assert got["hint"][2] >= 80 and got["hint_needs"] <= got["hint"][3], got

    # Back on the large screen: the window is as large as it was left there? No: the small
    # screen's run saved its own, and that one opens whole on the large screen too.
    again = _run(tmp_path, data, tiny_model_dir, "open", (1920, 1080))
    assert again["on_screen"] and again["chat"][2] >= CHAT_MIN_WIDTH - 16, again


def test_a_small_window_with_a_squeezed_chat_opens_with_the_chat_usable(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A window that the small screen would hold, left with the side panel as wide as it goes
    and the chat at its narrowest. Qt does not restore a geometry saved on a screen of another
    width (more than 1.25 times apart): the window is placed as on a first start, and the
    remembered pane widths are fitted to it, the chat first."""
    data = _data(tmp_path)
    left = _run(tmp_path, data, tiny_model_dir, "leave:700:440:50:30", (1920, 1080))
    got = _run(tmp_path, data, tiny_model_dir, "open", (800, 500))
    assert left["sizes"][2] > left["sizes"][1] - 16, left  # the side panel as wide as the chat
    assert got["on_screen"] and got["frame"][2] <= 800 and got["frame"][3] <= 500, got
    assert got["chat"][2] >= CHAT_MIN_WIDTH - 16 and got["chat"][2] >= got["side"] - 16, got
    assert got["hint"][2] >= 80 and got["hint_needs"] <= got["hint"][3], got


def test_the_side_panel_fits_1366x768_without_scrolling(tmp_path: Path, tiny_model_dir: Path):
    got = _run(tmp_path, _data(tmp_path), tiny_model_dir, "answer", (1366, 768))
    panel = got["panel"]
    # By default the figures and the loop are open, the sampling and system prompt folded to
    # one line each, and it all fits: no scroll bar, after an answer's figures and notes.
    assert panel["open"] == ["figures", "loop"] and not panel["notes"], got
    assert not panel["scrolls"] and panel["needed"] <= panel["viewport"], got
    sampling = panel["summaries"]["sampling"]
    assert sampling.startswith(("Precise", "Balanced", "Creative", "custom")), sampling
    assert "tokens" in sampling and "Chat" in sampling, sampling
    # Opening the sampling keeps it open and folds another to fit.
    after = got["after_sampling"]
    assert "sampling" in after["open"] and not after["scrolls"], got
    assert len(after["open"]) < 3, got
    # The figures opened again, then their notes: the figures stay open, others fold to fit.
    assert "figures" in got["after_figures"]["open"], got
    assert not got["after_figures"]["scrolls"], got
    notes = got["after_notes"]
    assert notes["notes"] and "figures" in notes["open"], got
    assert not notes["scrolls"] or notes["open"] == ["figures"], got
