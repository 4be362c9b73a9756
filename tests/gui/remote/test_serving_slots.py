"""File > Serve this model with several requests at once (the dialog's "Requests at once",
`chatapp serve --parallel N`): requests decode together on the window's engine, the side
panel's box says how many slots are busy, and a slot count whose KV caches do not fit is one
banner sentence, as `chatapp serve` refuses it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chatapp.engine import model_description
from chatapp.engine.engine import Engine
from chatapp.engine.text.chat import Message
from chatapp.gui.chat.controller import State
from chatapp.gui.main_window import MainWindow
from chatapp.gui.remote.serving import Serving
from tests.gui.conftest import ANSWER_TIMEOUT_MS, LOAD_TIMEOUT_MS, greedy, set_sampling
from tests.gui.remote.conftest import remote_ui
from tests.serving import slow_down


def start_with_slots(qtbot, window: MainWindow, slots: int) -> Serving:
    ui = remote_ui(window)
    with qtbot.waitSignal(ui.server.sig_started, timeout=LOAD_TIMEOUT_MS) as started:
        ui.serve_action.trigger()
        dialog = ui.serve_dialog
        assert dialog is not None
        dialog.slots_spin.setValue(slots)
        dialog.start_button.click()
    return started.args[0]


def test_two_requests_decode_together_and_the_panel_counts_slots(
    qtbot, window: MainWindow, tiny_model_dir: Path
) -> None:
    serving = start_with_slots(qtbot, window, 2)
    ui = remote_ui(window)
    assert serving.slots == 2
    box = ui.serving_box
    assert box.isVisible() and serving.url in box.address_label.text()
    assert box.slots_label.text().startswith("Slots busy: 0 of 2 (decoded together)")
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
    body |= {"temperature": 0, "repetition_penalty": 1.0}
    answers: list[Any] = []

    def ask() -> None:
        url = f"{serving.url}/chat/completions"
        answers.append(httpx2.post(url, json=body, timeout=60, trust_env=False))

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    qtbot.waitUntil(lambda: len(answers) == 2, timeout=ANSWER_TIMEOUT_MS)
    expected = Engine(tiny_model_dir, threads=1).chat([Message("user", "hello")], greedy(6))
    expected.run()
    for answer in answers:  # each the answer it gets alone
        assert answer.status_code == 200
        assert answer.json()["choices"][0]["message"]["content"] == expected.text
    qtbot.waitUntil(lambda: "2 requests answered" in box.slots_label.text(), timeout=5000)
    ui.server.busy_slots = lambda: (1, 2)  # type: ignore[method-assign]
    box.refresh()
    assert box.slots_label.text().startswith("Slots busy: 1 of 2")
    engine = window.host.engine
    assert engine is not None and engine._slots is not None
    ui.serve_action.trigger()  # off
    assert ui.server.serving is None and not box.isVisible()
    # The slots' KV caches (2 x the context) are not kept once nothing serves from them.
    qtbot.waitUntil(lambda: engine._slots is None, timeout=5000)


def test_slots_whose_memory_does_not_fit_are_refused_in_a_sentence(
    qtbot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slots' one KV budget (a context) cannot take half of 1 KiB of memory.
    monkeypatch.setattr(model_description, "physical_memory", lambda: 1 << 10)
    ui = remote_ui(window)
    with qtbot.waitSignal(ui.server.sig_failed, timeout=LOAD_TIMEOUT_MS):
        ui.serve_action.trigger()
        dialog = ui.serve_dialog
        assert dialog is not None
        dialog.slots_spin.setValue(4)
        dialog.start_button.click()
    text = window.banner.text()
    assert text.startswith("Could not serve 4 requests at once: The KV cache for")
    assert "\n" not in text and "Traceback" not in text
    assert not ui.serve_action.isChecked() and ui.server.serving is None
    assert not ui.serving_box.isVisible()


def test_served_requests_decode_while_the_chat_answers(
    qtbot, window: MainWindow, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch takes its passes between the chat's tokens: both go on at once, and every run
    of the model, the chat's and the batch's, is on the window's one engine thread."""
    serving = start_with_slots(qtbot, window, 2)
    engine = window.host.engine
    assert engine is not None
    restore = slow_down(engine, 0.005)  # the chat's 150 tokens last 0.75 s at least
    runs_on: set[str] = set()
    session = engine.session
    for name in ("run", "run_with_iobinding"):
        original = getattr(session, name)

        def recorded(*args: Any, _original: Any = original) -> Any:
            runs_on.add(threading.current_thread().name)
            return _original(*args)

        monkeypatch.setattr(session, name, recorded)
    body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 6}
    body |= {"temperature": 0, "repetition_penalty": 1.0}
    answers: list[Any] = []
    chat = window.chat.controller.backend_session
    try:
        set_sampling(window, greedy(150))
        window.chat.chat_view.set_prompt_text("a long one")
        window.chat.chat_view.send_button.click()
        qtbot.waitUntil(lambda: chat.state is State.GENERATING, timeout=ANSWER_TIMEOUT_MS)
        url = f"{serving.url}/chat/completions"
        for _ in range(2):  # not behind the chat's answer: on the slots, beside it
            threading.Thread(
                target=lambda: answers.append(
                    httpx2.post(url, json=body, timeout=60, trust_env=False)
                ),
                daemon=True,
            ).start()
        qtbot.waitUntil(lambda: len(answers) == 2, timeout=ANSWER_TIMEOUT_MS)
        served_while_chatting = chat.state is State.GENERATING
        qtbot.waitUntil(lambda: chat.state is State.READY, timeout=ANSWER_TIMEOUT_MS)
    finally:
        restore()
    expected = Engine(tiny_model_dir, threads=1).chat([Message("user", "hello")], greedy(6))
    expected.run()
    assert [a.json()["choices"][0]["message"]["content"] for a in answers] == [expected.text] * 2
    assert served_while_chatting
    assert runs_on == {"EngineWorkerThread"}
    answer = window.chat.conversation.messages[-1]
    assert answer.figures is not None and answer.figures.generated_tokens == 150
