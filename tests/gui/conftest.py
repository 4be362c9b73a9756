"""GUI test fixtures: offscreen Qt, settings in a temporary ini file, windows that are always
closed (and their worker threads stopped) at the end of a test."""

from __future__ import annotations

import dataclasses
import os

# A 1280x800 screen, like a laptop's, rather than the offscreen platform's 800x600: the window
# fits itself to the screen on first start (tests of small screens make their own).
os.environ["QT_QPA_PLATFORM"] = (
    "offscreen:configfile=" + os.path.join(os.path.dirname(__file__), "offscreen_1280x800.json")
    if os.environ.get("QT_QPA_PLATFORM", "offscreen") == "offscreen"
    else os.environ["QT_QPA_PLATFORM"]
)

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from chatapp.engine import loaded_model as engine_module
from chatapp.engine.devices import CPU, Device, StartedSession, create_session, session_options
from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.app import build_window
from chatapp.gui.chat.controller import State
from chatapp.gui.common.settings import SETTINGS_ENV
from chatapp.gui.compare import feature as compare_feature
from chatapp.gui.main_window import MainWindow
from chatapp.session.answer import AnswerRequest
from chatapp.session.jobs import Job
from chatapp.session.model_jobs import EngineHost
from chatapp.store import history as store_history

LOAD_TIMEOUT_MS = 60_000
ANSWER_TIMEOUT_MS = 60_000


@pytest.fixture(scope="session", autouse=True)
def _qapp_stays_up(qapp: QApplication) -> None:
    # Closing a test's last window must not quit the application under the next test.
    qapp.setQuitOnLastWindowClosed(False)


@pytest.fixture(autouse=True)
def history_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own chat history file (never the user's)."""
    path = tmp_path / "data" / "history.sqlite3"
    monkeypatch.setattr(store_history, "default_history_path", lambda: path)
    return path


@pytest.fixture(autouse=True)
def compare_results_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test keeps its comparison results in its own file (never the user's)."""
    path = tmp_path / "data" / "comparison.json"
    monkeypatch.setattr(compare_feature, "default_results_path", lambda: path)
    return path


@pytest.fixture(autouse=True)
def settings_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own QSettings file (never the user's)."""
    path = tmp_path / "settings" / "chatapp.ini"
    monkeypatch.setenv(SETTINGS_ENV, str(path))
    return path


WindowFactory = Callable[..., MainWindow]
EMULATED = dataclasses.replace(CPU, name="emulated", label="Emulated GPU", own_memory=True)


@pytest.fixture
def emulated_device(monkeypatch: pytest.MonkeyPatch) -> Device:
    """Every load starts on a device with its own memory (the CPU provider underneath): the
    loops re-bind inputs and count bytes as on a GPU, without needing one."""

    def start(
        path: Path,
        _device: Device,
        threads: int | None = None,
        precision: str = "fast",
        _graph: bytes | None = None,  # the CPU underneath runs the file's graph
    ) -> StartedSession:
        opts = session_options(threads, precision)
        return StartedSession(create_session(path, CPU, opts), EMULATED)

    monkeypatch.setattr(engine_module, "find_device", lambda _name: EMULATED)
    monkeypatch.setattr(engine_module, "start_session", start)
    return EMULATED


FAILING_GPU = dataclasses.replace(CPU, name="gpu-test", label="GPU (test)", own_memory=True)


@pytest.fixture
def failing_gpu(monkeypatch: pytest.MonkeyPatch) -> Device:
    """Every load asks for a GPU whose provider fails to start ("no driver"): the model runs
    on the CPU with loaded_model.start_model's reason."""
    real_start = engine_module.start_session

    def start(
        path: Path,
        device: Device,
        threads: int | None = None,
        precision: str | None = None,
        graph: bytes | None = None,
    ) -> StartedSession:
        if device is FAILING_GPU:
            raise RuntimeError("no driver")
        return real_start(path, device, threads, precision, graph)

    monkeypatch.setattr(engine_module, "find_device", lambda _name: FAILING_GPU)
    monkeypatch.setattr(engine_module, "start_session", start)
    return FAILING_GPU


@pytest.fixture
def make_window(qtbot) -> Iterator[WindowFactory]:
    """build_window(argv), waiting for the model to load unless wait=False."""
    windows: list[MainWindow] = []

    def make(argv: list[str], wait: bool = True) -> MainWindow:
        window = build_window(argv)
        windows.append(window)
        if wait:
            qtbot.waitUntil(
                lambda: window.chat.controller.backend_session.state is not State.LOADING,
                timeout=LOAD_TIMEOUT_MS,
            )
        return window

    yield make
    for window in windows:
        answer_unsaved(window, "discard")  # a test's unsaved chat must not ask (no one answers)
        window.close()
        assert not window.runner.running
        window.deleteLater()


@pytest.fixture
def generate_requests(monkeypatch: pytest.MonkeyPatch) -> list[AnswerRequest]:
    """Every AnswerRequest a window's chat submits from now on (what the model sees)."""
    from chatapp.session import chat_jobs as controller

    requests: list[AnswerRequest] = []
    real = controller.generate_job

    def recording(host: EngineHost, request: AnswerRequest) -> Job:
        requests.append(request)
        return real(host, request)

    monkeypatch.setattr(controller, "generate_job", recording)
    return requests


def answer_unsaved(window: MainWindow, answer: str) -> list[tuple[str, str]]:
    """Answer "this chat is not saved" questions with `answer`; returns the questions asked."""
    asked: list[tuple[str, str]] = []
    from chatapp.gui.history.ui import HistoryUi

    ui = window.feature(HistoryUi)
    if ui is not None:

        def ask(title: str, text: str, _discard: str) -> str:
            asked.append((title, text))
            return answer

        ui.unsaved.ask = ask
    return asked


def set_sampling(window: MainWindow, settings: SamplingSettings) -> None:
    panel = window.chat.side_panel
    panel.sampling_box.temperature_spin.setValue(settings.temperature)
    panel.sampling_box.top_k_spin.setValue(settings.top_k)
    panel.sampling_box.top_p_spin.setValue(settings.top_p)
    panel.sampling_box.repetition_spin.setValue(settings.repetition_penalty)
    panel.sampling_box.max_tokens_spin.setValue(settings.max_new_tokens)
    panel.sampling_box.seed_spin.setValue(-1 if settings.seed is None else settings.seed)


def greedy(max_new_tokens: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=max_new_tokens)


def send_and_wait(qtbot, window: MainWindow, text: str, timeout: int = ANSWER_TIMEOUT_MS) -> None:
    """Type `text`, press Send, wait until the answer is finished or failed."""
    window.chat.chat_view.set_prompt_text(text)
    controller = window.chat.controller
    with qtbot.waitSignals(
        [controller.backend_session.events.state_changed],
        timeout=timeout,
        check_params_cbs=[_is_ready],
    ):
        window.chat.chat_view.send_button.click()


def counted_transcript(qtbot, window: MainWindow, messages: int) -> str:
    """The transcript's text once the worker has counted the chat's `messages` messages: until
    then an answer's token count is on its figure line, after it on its header (one count per
    answer), so a test that reads before the count arrives races it."""
    view = window.chat.chat_view
    qtbot.waitUntil(
        lambda: (c := view.transcript.context) is not None and c.message_count == messages,
        timeout=10_000,
    )
    view.flush()
    return view.transcript.toPlainText()


def _is_ready(state: State) -> bool:
    return state is State.READY


def open_loaded_window(model_dir: Path) -> MainWindow:
    """build_window on `model_dir`, then wait (without qtbot: module-scoped fixtures use it
    too) until the model is loaded; fails with the window's message otherwise."""
    from PySide6.QtCore import QEventLoop, QTimer

    win = build_window(["--model", str(model_dir)])
    if win.chat.controller.backend_session.state is State.LOADING:
        loop = QEventLoop()
        win.chat.controller.backend_session.events.state_changed.connect(lambda _state: loop.quit())
        QTimer.singleShot(LOAD_TIMEOUT_MS, loop.quit)
        loop.exec()
    assert win.chat.controller.backend_session.state is State.READY, win.banner.text()
    return win
