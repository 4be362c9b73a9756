"""Both panes open on a small screen (800x500) and at 200% scaling: the chat keeps a usable
width (the panes narrow first, then the conversation list steps aside), the input hint is
readable, and the device box shows its whole label with its list inside the window.
Measured in a fresh process with the offscreen platform's screen set to that size."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.gui.common.geometry import CHAT_MIN_WIDTH
from tests.gui.window.test_view_options import offscreen_screen

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from PySide6.QtCore import QPoint, QRect, Qt, QTimer
from chatapp.gui.app import application, build_window
app = application()
w = build_window(["--model", sys.argv[1]])
w.show()
def rect(x):
    p = x.mapTo(w, QPoint(0, 0))
    return [p.x(), p.y(), x.width(), x.height()]
def report():
    sel, hint = w.chat.side_panel.device_selector, w.chat.chat_view.hint_label
    w.chat.chat_view.set_hint("Enter sends · Shift+Enter: new line")
    app.processEvents()
    items = [sel.itemText(i) for i in range(sel.count())]
    edit = w.chat.chat_view.prompt_edit
    viewport = edit.viewport()
    needs = edit.fontMetrics().boundingRect(
        QRect(0, 0, viewport.width() - 8, 10000), Qt.TextFlag.TextWordWrap,
        edit.placeholderText(),
    ).height()
    # A layout that makes the side panel wider than the chat (saved on another screen, or a
    # dragged handle): the window's next fit gives the chat its width back.
    sp = w.splitter
    sizes = sp.sizes()
    chat_index, side_index = sp.indexOf(w.tabs), sp.indexOf(w.side_scroll)
    moved = sizes[chat_index] - 40
    sizes[chat_index] -= moved
    sizes[side_index] += moved
    sp.setSizes(sizes)
    w.view_options.fit_chat()
    app.processEvents()
    refit = sp.sizes()
    print(json.dumps({
        "placeholder_needs": needs, "viewport_h": viewport.height(),
        "refit_chat": refit[chat_index], "refit_side": refit[side_index],
        "window": [w.width(), w.height()],
        "chat": rect(w.chat.chat_view), "prompt": rect(w.chat.chat_view.prompt_edit),
        "hint": rect(hint), "hint_needs": hint.heightForWidth(hint.width()),
        "list": w.conversation_list.isVisible(), "side": w.side_scroll.isVisible(),
        "selector": rect(sel), "side_rect": rect(w.side_scroll),
        "widest_item": max(sel.fontMetrics().horizontalAdvance(t) for t in items),
        "popup": sel.view().sizeHintForColumn(0),
    }))
    w.close()
    app.quit()
QTimer.singleShot(400, report)
app.exec()
"""


@pytest.mark.parametrize(
    ("width", "height", "scale"), [(800, 500, "1"), (1366, 768, "2")], ids=["800x500", "200%"]
)
def test_both_panes_open_leave_a_usable_chat(
    tmp_path: Path, tiny_model_dir: Path, width: int, height: int, scale: str
) -> None:
    config = offscreen_screen(tmp_path, width, height)
    data = tmp_path / "data"
    data.mkdir()
    # The user opened both panes (a first start on a small screen would hide them).
    (data / "chatapp.ini").write_text("[view]\nconversation_list=true\nside_panel=true\n")
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": f"offscreen:configfile={config}",
        "QT_SCALE_FACTOR": scale,
        "CHATAPP_DATA_DIR": str(data),
    }
    env.pop("CHATAPP_SETTINGS", None)
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tiny_model_dir)],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    window_w = got["window"][0]
    assert got["side"], got  # the side panel stays: it holds the figures
    if scale == "1":
        assert got["list"], got  # 800 px hold both panes beside the chat
    # The chat is usable: its page at least CHAT_MIN_WIDTH (less its margins).
    assert got["chat"][2] >= CHAT_MIN_WIDTH - 16, got
    assert got["prompt"][2] >= 180, got
    # The side panel is never wider than the chat, nor the placeholder cut.
    assert got["side_rect"][2] <= got["chat"][2] + 16, got
    assert got["refit_side"] <= got["refit_chat"], got
    assert got["placeholder_needs"] <= got["viewport_h"], got
    # The hint is whole: wrapped into the height it has, not cut to a letter.
    assert got["hint"][2] >= 80 and got["hint_needs"] <= got["hint"][3], got
    # The device box: every label fits the box, the box and its list the window.
    sx, _sy, sw, _sh = got["selector"]
    assert got["widest_item"] <= sw - 20, got
    assert sx + sw <= window_w and sx + max(sw, got["popup"]) <= window_w + 2, got
