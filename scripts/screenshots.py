"""Screenshots of the window for docs/images, as a new user sees it: fresh data and settings,
the README's question asked at the default settings, in a chosen theme. Run it under a real X
server (Xvfb) to see what users see; one window per run, the screen is Xvfb's:

    xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python scripts/screenshots.py \\
        --theme dark --out docs/images/chat-dark.png [--compare docs/images/compare.png]
    QT_SCALE_FACTOR=2 xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python \\
        scripts/screenshots.py --both-panes --out docs/images/scaled-200.png
    xvfb-run -a -s "-screen 0 800x500x24" .venv/bin/python scripts/screenshots.py \\
        --theme dark --both-panes --out docs/images/small-800x500-dark.png
    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/screenshots.py \\
        --model GEMMA_270M_BASE_DIR --prompt chat --out docs/images/base-model-chat.png
    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/screenshots.py \\
        --question "$(cat PROMPT)" --out docs/images/chat-speculative.png \\
        --speculative docs/images/speculative.png

It prints the window's and the input box's geometry and the answer, so a run also checks
that the input box is on the screen.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QEventLoop, QPoint, QTimer

QUESTION = "What is the capital of France?"


def wait_until(condition: Callable[[], bool], timeout_s: float) -> bool:
    loop = QEventLoop()
    timer = QTimer()
    timer.timeout.connect(lambda: loop.quit() if condition() else None)
    timer.start(50)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    loop.exec()
    timer.stop()
    return condition()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--theme", choices=("system", "light", "dark"), default="light")
    parser.add_argument("--out", type=Path, required=True, help="PNG of the chat")
    parser.add_argument("--compare", type=Path, default=None, help="PNG of a comparison run")
    parser.add_argument(
        "--compare-bottom",
        type=Path,
        default=None,
        help="PNG of the comparison scrolled to its end (the table), to check it by eye",
    )
    parser.add_argument(
        "--speculative",
        type=Path,
        default=None,
        help="PNG of View > Plain vs speculative after a run on its first grounded prompt",
    )
    parser.add_argument("--no-question", action="store_true", help="the empty window")
    parser.add_argument("--question", default=QUESTION, help="what is asked")
    parser.add_argument("--model", type=Path, default=None, help="a model folder, not the default")
    parser.add_argument(
        "--prompt", choices=("chat", "continue"), default=None, help="Sampling > Prompt"
    )
    parser.add_argument(
        "--both-panes",
        action="store_true",
        help="the conversation list and the side panel open (as a user who opened them)",
    )
    parser.add_argument(
        "--tools",
        type=Path,
        default=None,
        help="a JSON file of tools (Sampling > Tools), with 'Must call one'",
    )
    parser.add_argument(
        "--exact",
        action="store_true",
        help="Precision 'Exact' for the model, as a user who chose it (remembered per model)",
    )
    args = parser.parse_args()
    # The prepared default model, without copying it into the fresh data folder.
    from chatapp.convert.default_model import default_model_dir

    model = args.model or default_model_dir()
    data = Path(tempfile.mkdtemp(prefix="chatapp-shots-"))
    os.environ["CHATAPP_DATA_DIR"] = str(data)  # fresh data and settings
    os.environ.pop("CHATAPP_SETTINGS", None)
    remembered = ""
    if args.both_panes:
        remembered += "[view]\nconversation_list=true\nside_panel=true\n"
    if remembered:
        (data / "chatapp.ini").write_text(remembered)
    if args.exact:
        from PySide6.QtCore import QSettings

        from chatapp.gui.common.load_memory import remember_precision

        settings = QSettings(str(data / "chatapp.ini"), QSettings.Format.IniFormat)
        remember_precision(settings, Path(model), "exact")
        settings.sync()
    from chatapp.gui.app import application, build_window
    from chatapp.gui.chat.controller import State
    from chatapp.gui.chat.feature import chat_of
    from chatapp.gui.compare.feature import CompareFeature

    app = application()
    window = build_window(["--model", str(model)])
    window.view_options.set_theme(args.theme)
    chat = chat_of(window)
    if not wait_until(lambda: chat.controller.backend_session.state is State.READY, 60):
        print("the model did not load:", window.banner.text(), file=sys.stderr)
        window.close()
        return 1
    answer = ""
    if args.prompt is not None:
        choices = chat.side_panel.sampling_box.prompt.choice_combo
        choices.setCurrentIndex(choices.findData(args.prompt))
    if args.tools is not None:
        tools = chat.side_panel.sampling_box.tools
        if not tools.load_file(args.tools):
            print(window.banner.text(), file=sys.stderr)
            return 1
        tools.choice_box.setCurrentIndex(tools.choice_box.findData("required"))
    if not args.no_question:
        chat.chat_view.set_prompt_text(args.question)
        chat.chat_view.send_button.click()
        wait_until(lambda: chat.controller.backend_session.state is State.GENERATING, 10)
        wait_until(lambda: chat.controller.backend_session.state is State.READY, 120)
        answer = chat.conversation.messages[-1].content
    chat.chat_view.prompt_edit.setFocus()
    wait_until(lambda: False, 0.5)  # let the last paint land
    args.out.parent.mkdir(parents=True, exist_ok=True)
    window.grab().save(str(args.out))
    prompt = chat.chat_view.prompt_edit
    corner = prompt.mapToGlobal(QPoint(0, 0))
    area = window.screen().availableGeometry()
    report = {
        "screen": [area.width(), area.height()],
        "window": [window.x(), window.y(), window.width(), window.height()],
        "input_box": [corner.x(), corner.y(), prompt.width(), prompt.height()],
        "input_box_on_screen": area.contains(prompt.rect().translated(corner)),
        # Widths of the conversation list, the chat and the side panel (0: hidden).
        "panes": [
            w.width() if w.isVisible() else 0
            for w in (window.conversation_list, chat.chat_view, window.side_scroll)
        ],
        "answer": answer,
    }
    if args.compare is not None:
        compare = window.feature(CompareFeature)
        assert compare is not None
        view = compare.view
        compare.show()
        view.tokens_spin.setValue(32)
        view.repeats_spin.setValue(3)  # the spreads and the runs' ratios the sentences quote
        view.run_comparison()
        wait_until(lambda: view.running, 5)
        wait_until(lambda: not view.running, 400)
        wait_until(lambda: False, 0.5)
        window.grab().save(str(args.compare))
        if args.compare_bottom is not None:
            from PySide6.QtWidgets import QScrollArea

            scroll = view.findChild(QScrollArea, "compareScroll")
            bar = scroll.verticalScrollBar()
            bar.setValue(bar.maximum())
            wait_until(lambda: False, 0.5)
            window.grab().save(str(args.compare_bottom))
    if args.speculative is not None:
        from chatapp.gui.compare.speculative_feature import SpeculativeFeature

        feature = window.feature(SpeculativeFeature)
        assert feature is not None
        feature.action.trigger()
        feature.view.repeats_spin.setValue(3)
        feature.view.run_button.click()
        wait_until(lambda: feature.view.running, 5)
        wait_until(lambda: not feature.view.running, 300)
        wait_until(lambda: False, 0.5)
        window.grab().save(str(args.speculative))
        report["speculative"] = feature.view.results.text()
    print(json.dumps(report))
    window.close()
    app.quit()
    return 0


if __name__ == "__main__":
    sys.exit(main())
