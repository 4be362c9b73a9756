"""Run in a fresh process on a screen the test chose (Qt's offscreen platform), as
`python -m tests.gui.window.pane_probe MODEL PHASE`; prints one JSON line.

PHASE "leave" (or "leave:W:H:X:Y"): a person on a large screen sizes and places the window,
widens both panes, then quits (the window saves its geometry and pane widths). "open": the
window as it opens (on whatever screen the next run has), with where its parts are. "answer":
"open" after one answer, with the side panel's sections and whether it scrolls, then again
after opening the sampling, the figures again, and their notes.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QEventLoop, QPoint, QTimer
from PySide6.QtWidgets import QWidget

from chatapp.gui.app import application, build_window
from chatapp.gui.chat.controller import State


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    loop = QEventLoop()
    timer = QTimer()
    timer.timeout.connect(lambda: loop.quit() if condition() else None)
    timer.start(20)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    timer.stop()
    return condition()


def main() -> None:
    app = application()
    model, phase = sys.argv[1], sys.argv[2]
    w = build_window(["--model", model])
    w.show()
    chat = w.chat
    wait_until(lambda: chat.controller.backend_session.state is State.READY, 60)
    wait_until(lambda: False, 0.3)  # the splitter's restore runs once the window is shown

    def rect(x: QWidget) -> list[int]:
        p = x.mapTo(w, QPoint(0, 0))
        return [p.x(), p.y(), x.width(), x.height()]

    out: dict[str, Any] = {}
    if phase.startswith("leave"):
        # "leave" or "leave:W:H:X:Y", the window's size and place as the person left it.
        width, height, x, y = (int(v) for v in (phase.split(":")[1:] or (1800, 1000, 60, 40)))
        w.resize(width, height)
        w.move(x, y)
        wait_until(lambda: False, 0.2)
        sizes = [520, 760, 520] if width > 1600 else [250, width - 640, 390]
        w.splitter.setSizes(sizes)  # list, chat, side panel: the side panel wide
        wait_until(lambda: False, 0.2)
        out["sizes"] = w.splitter.sizes()
    else:
        if phase == "answer":
            chat.chat_view.set_prompt_text("hello")
            chat.chat_view.send_button.click()
            wait_until(lambda: chat.controller.backend_session.state is State.GENERATING, 10)
            wait_until(lambda: chat.controller.backend_session.state is State.READY, 60)
            wait_until(lambda: False, 0.3)
            out["panel"] = panel_state(w)
            w.chat.side_panel.sections["sampling"].header.click()
            wait_until(lambda: False, 0.3)
            out["after_sampling"] = panel_state(w)
            if not w.chat.side_panel.sections.is_open("figures"):
                w.chat.side_panel.sections["figures"].header.click()
                wait_until(lambda: False, 0.3)
            out["after_figures"] = panel_state(w)
            w.chat.side_panel.figures_box.notes_section.header.click()
            wait_until(lambda: False, 0.3)
            out["after_notes"] = panel_state(w)
        area = w.screen().availableGeometry()
        frame = w.frameGeometry()
        hint = chat.chat_view.hint_label
        out.update(
            screen=[area.x(), area.y(), area.width(), area.height()],
            frame=[frame.x(), frame.y(), frame.width(), frame.height()],
            on_screen=area.contains(frame),
            chat=rect(chat.chat_view),
            prompt=rect(chat.chat_view.prompt_edit),
            hint=rect(hint),
            hint_needs=hint.heightForWidth(hint.width()),
            list=w.conversation_list.width() if w.conversation_list.isVisible() else 0,
            side=w.side_scroll.width() if w.side_scroll.isVisible() else 0,
            side_min=w.side_scroll.minimumWidth(),
        )
    print(json.dumps(out))
    w.shutdown()  # saves the geometry and pane widths, as closing the window does
    app.quit()


def panel_state(w: Any) -> dict[str, Any]:
    panel = w.chat.side_panel
    sections = panel.sections
    bar = w.side_scroll.verticalScrollBar()
    return {
        "open": [n for n in ("figures", "loop", "sampling", "system") if sections.is_open(n)],
        "notes": sections.is_open("notes"),
        "scrolls": bar.maximum() > 0,
        "needed": panel.minimumSizeHint().height(),
        "viewport": w.side_scroll.viewport().height(),
        "summaries": {n: sections[n].summary.full_text() for n in ("sampling", "system")},
    }


if __name__ == "__main__":
    main()
