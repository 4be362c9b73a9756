"""File > Serve this model: the window's own engine answers an OpenAI client on 127.0.0.1,
through the window's JobRunner (requests and the chat's answers take turns); the toggle and
closing the window stop it. Clients run in threads: the GUI thread must stay free, since it
is the one that queues each request for the worker."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from PySide6.QtGui import QGuiApplication

from chatapp.engine.engine import Engine
from chatapp.engine.text.chat import Message
from chatapp.gui.main_window import MainWindow
from chatapp.gui.remote.serving import Serving
from tests.gui.conftest import (
    ANSWER_TIMEOUT_MS,
    LOAD_TIMEOUT_MS,
    greedy,
    send_and_wait,
    set_sampling,
)
from tests.gui.remote.conftest import accept_port, remote_ui
from tests.serving import slow_down

openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")


def start_serving(qtbot, window: MainWindow, slots: int | None = None) -> Serving:
    """Serve this model (the dialog's port; its requests at once unless `slots`)."""
    ui = remote_ui(window)
    with qtbot.waitSignal(ui.server.sig_started, timeout=LOAD_TIMEOUT_MS) as started:
        ui.serve_action.trigger()
        if slots is not None:
            assert ui.serve_dialog is not None
            ui.serve_dialog.slots_spin.setValue(slots)
        accept_port(ui)
    serving = started.args[0]
    assert isinstance(serving, Serving) and ui.serve_action.isChecked()
    return serving


def in_thread(qtbot, call: Callable[[], Any]) -> Any:
    """Run a blocking client call off the GUI thread; wait (bounded) for its result."""
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(_outcome(call)), daemon=True)
    thread.start()
    qtbot.waitUntil(lambda: bool(out), timeout=ANSWER_TIMEOUT_MS)
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except BaseException as exc:
        return exc


def refused(url: str) -> bool:
    try:
        httpx2.get(f"{url}/models", timeout=5, trust_env=False)
    except httpx2.ConnectError:
        return True
    except httpx2.TransportError:  # accepted, then reset while the server shuts down: not yet
        return False
    return False


def test_the_window_serves_its_model_to_an_openai_client(
    qtbot, window: MainWindow, tiny_model_dir: Path
) -> None:
    serving = start_serving(qtbot, window)
    ui = remote_ui(window)
    assert serving.url.startswith("http://127.0.0.1:") and serving.url.endswith("/v1")
    assert serving.model == "tiny-llama"
    assert ui.serving_label.isVisible() and serving.url in ui.serving_label.text()
    ui.copy_button.click()
    clipboard = QGuiApplication.clipboard()
    assert clipboard is not None and clipboard.text() == serving.url

    with openai.OpenAI(base_url=serving.url, api_key="unused", max_retries=0) as client:
        answer = in_thread(
            qtbot,
            lambda: client.chat.completions.create(
                model="tiny-llama",
                messages=[{"role": "user", "content": "hello"}],
                max_tokens=6,
                temperature=0,
                extra_body={"repetition_penalty": 1.0},
            ),
        )
    expected = Engine(tiny_model_dir, threads=1).chat([Message("user", "hello")], greedy(6))
    expected.run()
    assert answer.choices[0].message.content == expected.text
    assert answer.model_extra["chatapp"]["device"] == "cpu"
    qtbot.waitUntil(lambda: "1 request" in ui.serving_label.text(), timeout=ANSWER_TIMEOUT_MS)

    ui.serve_action.trigger()  # off
    assert not ui.serve_action.isChecked() and ui.server.serving is None
    assert not ui.serving_label.isVisible()
    # uvicorn's end is awaited on the tool thread: the port closes soon after, not at once
    qtbot.waitUntil(lambda: refused(serving.url), timeout=ANSWER_TIMEOUT_MS)


def test_served_requests_and_the_chat_take_turns(qtbot, window: MainWindow) -> None:
    serving = start_serving(qtbot, window, slots=1)  # one at a time: turns with the chat
    worker = remote_ui(window).server.worker
    assert worker is not None
    engine = window.host.engine
    assert engine is not None
    restore = slow_down(engine, 0.005)  # a served answer of 150 tokens lasts 0.75 s at least
    try:
        body = {
            "messages": [{"role": "user", "content": "a long one"}],
            "max_tokens": 150,
            "temperature": 0,
        }
        served: list[Any] = []
        thread = threading.Thread(
            target=lambda: served.append(
                httpx2.post(
                    f"{serving.url}/chat/completions", json=body, timeout=60, trust_env=False
                )
            ),
            daemon=True,
        )
        thread.start()
        qtbot.waitUntil(lambda: worker.running is not None, timeout=ANSWER_TIMEOUT_MS)
        set_sampling(window, greedy(5))
        send_and_wait(qtbot, window, "meanwhile")  # queued behind the served request
        chat_done = time.perf_counter()
        qtbot.waitUntil(lambda: bool(served), timeout=ANSWER_TIMEOUT_MS)
    finally:
        restore()
    assert served[0].status_code == 200
    assert served[0].json()["usage"]["completion_tokens"] == 150
    (record,) = list(worker.records)
    assert record.finished_at < chat_done  # the chat waited for its turn
    answer = window.chat.conversation.messages[-1]
    assert answer.figures is not None and answer.figures.generated_tokens == 5


def test_closing_the_window_stops_the_server(qtbot, window: MainWindow) -> None:
    serving = start_serving(qtbot, window)
    assert not refused(serving.url)
    window.close()
    assert refused(serving.url)
    assert remote_ui(window).server.serving is None


def test_serving_turned_off_waits_for_uvicorn_on_the_tool_thread(
    qtbot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvicorn's end waits up to 10 s for open streams: never on the GUI thread.
    from chatapp.server import runner

    stopped_on: list[threading.Thread] = []
    real_stop = runner.ServerThread.stop

    def recorded_stop(self: Any, timeout: float = 10.0) -> None:
        real_stop(self, timeout)
        stopped_on.append(threading.current_thread())

    monkeypatch.setattr(runner.ServerThread, "stop", recorded_stop)
    serving = start_serving(qtbot, window)
    ui = remote_ui(window)
    ui.serve_action.trigger()  # off
    assert ui.server.serving is None and not ui.serve_action.isChecked()
    qtbot.waitUntil(lambda: bool(stopped_on), timeout=LOAD_TIMEOUT_MS)
    assert stopped_on[0] is not threading.main_thread()
    assert refused(serving.url)


def test_a_new_model_is_served_at_the_same_address(
    qtbot, window: MainWindow, varied_model_dir: Path
) -> None:
    serving = start_serving(qtbot, window)
    ui = remote_ui(window)
    with qtbot.waitSignal(ui.server.sig_started, timeout=LOAD_TIMEOUT_MS) as restarted:
        window.open_model(varied_model_dir)
    again = restarted.args[0]
    assert again.port == serving.port and again.model == "varied-llama"
    models = in_thread(qtbot, lambda: httpx2.get(f"{again.url}/models", trust_env=False).json())
    assert [m["id"] for m in models["data"]] == ["varied-llama"]
    assert ui.serve_action.isChecked()


def test_serving_turned_off_while_the_server_starts_leaves_nothing_listening(
    qtbot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    # uvicorn starts on the window's tool thread; hold it there until the toggle is off.
    from chatapp.server import runner

    gate, urls = threading.Event(), []
    real_start = runner.ServerThread.start

    def held_start(app: Any, sock: Any, **kwargs: Any) -> Any:
        assert threading.current_thread() is not threading.main_thread()
        gate.wait(30)
        server = real_start(app, sock, **kwargs)
        urls.append(server.url)
        return server

    monkeypatch.setattr(runner.ServerThread, "start", held_start)
    ui = remote_ui(window)
    started: list[object] = []
    ui.server.sig_started.connect(started.append)
    ui.serve_action.trigger()
    accept_port(ui)
    assert ui.server.active
    qtbot.waitUntil(lambda: ui.server.worker is not None, timeout=LOAD_TIMEOUT_MS)
    ui.serve_action.trigger()  # off, before the server listens
    gate.set()
    qtbot.waitUntil(lambda: not ui.server.active, timeout=LOAD_TIMEOUT_MS)
    assert started == [] and ui.server.serving is None and not ui.serve_action.isChecked()
    assert urls and refused(f"{urls[0]}/v1")
    send_and_wait(qtbot, window, "still answering")  # the chat goes on


@pytest.mark.parametrize("slots", [1, 2])
def test_served_requests_render_with_the_template_while_the_chat_continues_text(
    qtbot, window: MainWindow, slots: int
) -> None:
    """The prompt style is the chat's request's, not the shared tokenizer's: before, a served
    chat was sent as the text the window's last answer continued (issue 50)."""
    from chatapp.engine.text.chat import STYLE_CONTINUE
    from chatapp.session import prompt_style as ps

    engine = window.host.engine
    assert engine is not None and engine.tokenizer.has_template
    question = [Message("user", "hello there")]
    templated = len(engine.tokenizer.chat_ids(question))
    continued = len(engine.tokenizer.chat_ids(question, style=STYLE_CONTINUE))
    assert templated != continued
    prompt = window.chat.side_panel.sampling_box.prompt
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CONTINUE))
    set_sampling(window, greedy(3))
    send_and_wait(qtbot, window, "hello there")  # the chat continued text last
    context = window.chat.controller.chat.context
    assert context is not None and context.prompt_tokens == continued

    serving = start_serving(qtbot, window, slots=slots)
    body = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 3}
    response = in_thread(
        qtbot,
        lambda: httpx2.post(
            f"{serving.url}/chat/completions", json=body, timeout=60, trust_env=False
        ),
    )
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == templated
