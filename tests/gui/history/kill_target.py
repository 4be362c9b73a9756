"""The real window, offscreen, in a process that the kill test ends with SIGKILL mid-answer.

    python -m tests.gui.history.kill_target MODEL_DIR send|regenerate

CHATAPP_DATA_DIR and CHATAPP_SETTINGS come from the environment. Answers one question
("first question"), prints ANSWERED, then starts a long answer (a new question for `send`, the
first answer again for `regenerate`) and prints STREAMING once its first tokens arrived,
then runs until killed. Each step is slowed down (10 ms) so the answer lasts long enough.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QCoreApplication, QEventLoop

from chatapp.engine import loops
from chatapp.gui.app import build_window
from chatapp.gui.chat.controller import State


def _slow_forward(original):
    def forward(self, new_ids, all_logits=False, rows=None):
        time.sleep(0.01)
        return original(self, new_ids, all_logits, rows)

    return forward


def main(model_dir: str, action: str) -> int:
    loops.KVLoop.forward = _slow_forward(loops.KVLoop.forward)
    window = build_window(["--model", model_dir])
    app = QCoreApplication.instance()

    def wait(condition, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
            time.sleep(0.002)
            if time.monotonic() > deadline:
                raise SystemExit("timed out")

    c = window.chat.controller
    backend = c.backend_session
    wait(lambda: backend.state is not State.LOADING)
    if backend.state is not State.READY:
        raise SystemExit(f"model did not load: {window.banner.text()}")
    panel = window.chat.side_panel
    panel.sampling_box.temperature_spin.setValue(0.0)
    panel.sampling_box.repetition_spin.setValue(1.0)
    panel.sampling_box.max_tokens_spin.setValue(6)
    window.chat.chat_view.set_prompt_text("first question")
    window.chat.chat_view.send_button.click()
    wait(lambda: backend.state is State.READY and len(c.chat.conversation.messages) == 2)
    print("ANSWERED", c.chat.conversation.messages[-1].content.replace("\n", " "), flush=True)

    panel.sampling_box.max_tokens_spin.setValue(400)
    batches: list[object] = []
    c.chat.events.answer_delta.connect(batches.append)
    if action == "send":
        window.chat.chat_view.set_prompt_text("second question")
        window.chat.chat_view.send_button.click()
    else:
        window.chat.chat_view.regenerate_button.click()
    # Tokens, not text: the tiny model's random tokens may hold back partial characters.
    wait(lambda: len(batches) >= 2)
    print("STREAMING", flush=True)
    while True:  # until SIGKILL
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        time.sleep(0.002)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
