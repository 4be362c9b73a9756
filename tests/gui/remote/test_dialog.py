"""The connect dialog: models fetched by a job on the window's worker thread, Connect only once
the server answered, a word before a key travels unencrypted, keys written to disk only when the
user asks, and a server answering garbage or nothing is one line in the dialog. Servers on
127.0.0.1 only (the notice's "other machine" is an address nobody contacts)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from chatapp.gui.chat.controller import State
from chatapp.gui.main_window import MainWindow
from chatapp.gui.remote.dialog import KEY_NOT_SAVED, KEY_SAVED
from chatapp.gui.remote.ui import RECENT_SERVERS_KEY
from chatapp.remote.client import Timeouts
from chatapp.session import remote_jobs
from tests.gui.conftest import WindowFactory
from tests.gui.remote.conftest import connect, fetch, remote_ui
from tests.remote.fake_server import MODELS, Action, FakeServer, Request, response
from tests.serving import Served, serving

KEY = "a-key-of-at-least-16-characters"


@pytest.fixture(scope="module")
def keyed(tiny_model_dir: Path) -> Iterator[Served]:
    with serving(Engine(tiny_model_dir, threads=1), api_key=KEY) as s:
        yield s


def test_models_are_fetched_on_the_worker_thread(
    qtbot, window: MainWindow, served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    real = remote_jobs.list_models

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(remote_jobs, "list_models", recording)
    dialog = remote_ui(window).open_connect_dialog()
    assert dialog.isVisible() and not dialog.connect_button.isEnabled()
    fetch(qtbot, dialog, served.url)
    assert threads == ["EngineWorkerThread"]  # never the GUI thread
    assert dialog.model_box.count() == 1 and dialog.model_box.currentData() == "varied-llama"
    assert "512-token context" in dialog.model_box.currentText()
    assert dialog.connect_button.isEnabled() and "serves 1 model" in dialog.status.text()
    assert dialog.request().model == "varied-llama"
    # Editing the address makes the list stale: fetch again before connecting.
    dialog.address.setCurrentText(served.url + "/v1")
    assert not dialog.connect_button.isEnabled() and dialog.model_box.count() == 0
    dialog.reject()


def test_a_wrong_address_or_key_is_one_line_in_the_dialog(
    qtbot, window: MainWindow, keyed: Served
) -> None:
    dialog = remote_ui(window).open_connect_dialog()
    dialog.address.setCurrentText("ftp://127.0.0.1:21")
    dialog.fetch_button.click()  # refused before anything is sent
    assert "must start with http:// or https://" in dialog.status.text()
    fetch(qtbot, dialog, keyed.url)  # no key
    assert "refused the API key" in dialog.status.text()
    assert not dialog.connect_button.isEnabled()
    fetch(qtbot, dialog, keyed.url, "wrong-key-wrong-key")
    assert "refused the API key" in dialog.status.text()
    fetch(qtbot, dialog, keyed.url, KEY)
    assert dialog.connect_button.isEnabled(), dialog.status.text()
    dialog.reject()


def test_the_key_is_kept_in_memory_only(
    qtbot, window: MainWindow, keyed: Served, settings_file: Path
) -> None:
    connect(qtbot, window, keyed.url, KEY)
    assert window.chat.controller.backend_session.remote is not None
    window.settings.sync()
    saved = settings_file.read_text(encoding="utf-8")
    assert keyed.url in saved and KEY not in saved  # the address is remembered, not the key
    assert window.settings.value(RECENT_SERVERS_KEY) in (keyed.url, [keyed.url])
    # This session offers it again for the same server.
    dialog = remote_ui(window).open_connect_dialog()
    assert dialog.url() == keyed.url and dialog.api_key() == KEY
    assert any(label.text() == KEY_NOT_SAVED for label in dialog.findChildren(type(dialog.status)))
    dialog.reject()


def test_a_key_over_plain_http_to_another_machine_gets_a_word_first(
    window: MainWindow,
) -> None:
    dialog = remote_ui(window).open_connect_dialog()  # nothing is fetched in this test
    dialog.address.setCurrentText("http://10.11.12.13:8000/v1")
    assert dialog.notice.isHidden()  # no key: nothing to leak
    dialog.key_edit.setText("secret")
    assert not dialog.notice.isHidden()
    assert "unencrypted to 10.11.12.13" in dialog.notice.text()
    dialog.address.setCurrentText("https://10.11.12.13:8000/v1")
    assert dialog.notice.isHidden()
    dialog.address.setCurrentText("http://127.0.0.1:8000/v1")
    dialog.key_edit.setText("secret")
    assert dialog.notice.isHidden()  # this machine: the key does not cross a network
    dialog.reject()


def test_a_key_is_written_to_disk_only_when_the_user_asks(
    qtbot,
    window: MainWindow,
    keyed: Served,
    settings_file: Path,
    make_window: WindowFactory,
    tiny_model_dir: Path,
) -> None:
    dialog = remote_ui(window).open_connect_dialog()
    dialog.address.setCurrentText(keyed.url)
    assert not dialog.remember_box.isChecked() and dialog.key_note.text() == KEY_NOT_SAVED
    dialog.remember_box.setChecked(True)
    assert dialog.key_note.text() == KEY_SAVED and "unencrypted" in KEY_SAVED
    fetch(qtbot, dialog, keyed.url, KEY)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.backend_changed, timeout=30_000
    ):
        dialog.connect_button.click()
    window.settings.sync()
    assert KEY in settings_file.read_text(encoding="utf-8")
    # The next start offers it, ticked; unticking and connecting forgets it.
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=30_000
    )
    window.close()
    later = make_window(["--model", str(tiny_model_dir)])
    dialog = remote_ui(later).open_connect_dialog()
    dialog.address.setCurrentText(keyed.url)
    assert dialog.api_key() == KEY and dialog.remember_box.isChecked()
    dialog.remember_box.setChecked(False)
    fetch(qtbot, dialog, keyed.url, KEY)
    with qtbot.waitSignal(
        later.chat.controller.backend_session.events.backend_changed, timeout=30_000
    ):
        dialog.connect_button.click()
    later.settings.sync()
    assert KEY not in settings_file.read_text(encoding="utf-8")
    assert (
        later.chat.controller.backend_session.remote is not None
    )  # this session still has the key


def hostile(fakes: list[FakeServer], actions: list[Action]) -> FakeServer:
    def script(_request: Request) -> list[Action]:
        return actions

    server = FakeServer(script)
    fakes.append(server)
    return server


@pytest.fixture
def fakes() -> Iterator[list[FakeServer]]:
    started: list[FakeServer] = []
    yield started
    for server in started:
        server.close()


@pytest.mark.parametrize(
    ("actions", "words"),
    [
        ([response(200, b"<html>not an API</html>", "text/html")], "not JSON"),
        ([response(200, b'{"data": 42}')], "list of models"),
        ([response(502, b"Bad Gateway", "text/plain")], "502"),
        ([b'HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{"da', None], "closed"),
        ([20.0], "nothing for 0.5 s"),
    ],
    ids=["html", "wrong-shape", "bad-gateway", "cut", "silence"],
)
def test_a_hostile_server_is_one_line_in_the_dialog_and_the_window_goes_on(
    qtbot, window: MainWindow, fakes: list[FakeServer], actions: list[Action], words: str
) -> None:
    ui = remote_ui(window)
    ui.listing_timeouts = Timeouts(connect_s=2.0, read_s=0.5, write_s=2.0)
    server = hostile(fakes, actions)
    dialog = ui.open_connect_dialog()
    fetch(qtbot, dialog, server.url)
    status = dialog.status.text()
    assert words in status, status
    assert "\n" not in status and "Traceback" not in status
    assert not dialog.connect_button.isEnabled()
    dialog.reject()
    # The local model still answers.
    assert (
        window.chat.controller.backend_session.remote is None
        and window.chat.controller.backend_session.state is State.READY
    )
    assert window.banner.isHidden()


def test_a_server_that_goes_silent_on_connect_keeps_the_local_model(
    qtbot, window: MainWindow, fakes: list[FakeServer]
) -> None:
    listed: list[Request] = []

    def script(request: Request) -> list[Action]:
        listed.append(request)
        return [MODELS] if len(listed) == 1 else [20.0]  # lists once, then nothing

    server = FakeServer(script)
    fakes.append(server)
    ui = remote_ui(window)
    ui.listing_timeouts = Timeouts(connect_s=2.0, read_s=0.5, write_s=2.0)
    dialog = ui.open_connect_dialog()
    fetch(qtbot, dialog, server.url)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.load_failed, timeout=10_000
    ) as failed:
        dialog.connect_button.click()
    assert "sent nothing for 0.5 s while listing the models" in failed.args[0]
    qtbot.waitUntil(lambda: window.chat.controller.backend_session.state is State.READY)
    assert (
        window.chat.controller.backend_session.remote is None
        and window.chat.controller.backend_session.model is not None
    )
    assert "Still using tiny-llama" in window.banner.text()
