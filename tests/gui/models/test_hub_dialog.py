"""File > Get models… against the fake hub: search, files with fit marks (an unsupported one
greyed with why), download with progress, cancel and resume, Open converts the file and the
chat answers with it; File > Models then says where it came from."""

from __future__ import annotations

from pathlib import Path

from chatapp.gui.models.hub_dialog import GetModelsDialog
from chatapp.gui.models.library import ModelsDialog
from chatapp.hub.download import PART_SUFFIX
from tests.gui.conftest import (
    LOAD_TIMEOUT_MS,
    WindowFactory,
    answer_unsaved,
    greedy,
    send_and_wait,
    set_sampling,
)
from tests.hub.conftest import fake_hub, hub_env  # noqa: F401 (fixtures)
from tests.hub.fake_hub import COMMIT, FakeHub, HostedRepo
from tests.tiny_model import write_tiny_gguf

REPO = "someone/Tiny-Llama-GGUF"
FILE = "tiny-llama-Q4_1.gguf"


def _host(hub: FakeHub, tiny_gguf: Path, tmp_path: Path) -> None:
    phi2 = write_tiny_gguf(tmp_path / "phi2.gguf", architecture="phi2")
    hub.add(HostedRepo(REPO, {FILE: tiny_gguf.read_bytes()}, context_length=512))
    hub.add(HostedRepo("someone/Tiny-Phi2-GGUF", {"phi2-Q4_1.gguf": phi2.read_bytes()}, "phi2"))


def _open_dialog(window) -> GetModelsDialog:  # type: ignore[no-untyped-def]
    window.menus.get_models_action.trigger()
    dialog = window.findChild(GetModelsDialog)
    assert isinstance(dialog, GetModelsDialog) and dialog.isVisible()
    return dialog


def _list_repo(qtbot, dialog: GetModelsDialog, text: str) -> None:  # type: ignore[no-untyped-def]
    dialog.search_edit.setText(text)
    dialog.search_button.click()
    qtbot.waitUntil(lambda: dialog.repo_list.count() == 1, timeout=10_000)
    dialog.repo_list.setCurrentRow(0)
    qtbot.waitUntil(lambda: dialog.file_table.rowCount() == 1, timeout=10_000)


def test_search_download_cancel_resume_open_and_chat(
    qtbot,
    make_window: WindowFactory,
    fake_hub: FakeHub,  # noqa: F811
    hub_env: Path,  # noqa: F811
    tiny_gguf: Path,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    _host(fake_hub, tiny_gguf, tmp_path)
    window = make_window(["--model", str(tiny_model_dir)])
    answer_unsaved(window, "discard")
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "a question to the first model")
    requests_before = len(fake_hub.requests)
    dialog = _open_dialog(window)
    assert len(fake_hub.requests) == requests_before  # nothing asked before the search

    _list_repo(qtbot, dialog, "Tiny-Llama")
    assert dialog.select_file(FILE)
    assert dialog.file_table.item(0, 3).text() == "fits"
    # The header, read with a ranged request, adds the KV cache to the estimate.
    qtbot.waitUntil(lambda: "KV for" in dialog.detail_label.text(), timeout=10_000)

    fake_hub.chunk = 2 << 10
    fake_hub.throttle_s = 0.05  # slow enough to see a rate and to cancel during
    dialog.download_button.click()
    qtbot.waitUntil(lambda: dialog.progress_bar.value() > 0, timeout=10_000)
    # bytes, rate and time left, once a rate is measured
    qtbot.waitUntil(lambda: "/s, " in dialog.message_label.text(), timeout=10_000)
    assert " of " in dialog.message_label.text() and "left" in dialog.message_label.text()
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: dialog.download is None, timeout=10_000)
    assert "cancelled" in dialog.message_label.text()
    assert dialog.download_button.text().startswith("Resume (")
    assert not dialog.open_button.isEnabled()
    part = next((hub_env / ".downloads").rglob("*" + PART_SUFFIX))
    kept = part.stat().st_size
    assert 0 < kept < tiny_gguf.stat().st_size

    fake_hub.throttle_s = 0.0
    dialog.download_button.click()
    qtbot.waitUntil(lambda: dialog.open_button.isEnabled(), timeout=20_000)
    assert ("GET", f"/cdn/{REPO}/{FILE}", f"bytes={kept}-") in fake_hub.requests
    controller = window.chat.controller
    dialog.open_button.click()  # converts, then opens the new folder
    qtbot.waitUntil(
        lambda: (
            window.chat.model_dir is not None
            and window.chat.model_dir.parent == hub_env
            and controller.backend_session.model is not None
            and controller.backend_session.model.folder.parent == hub_env
        ),
        timeout=LOAD_TIMEOUT_MS,
    )
    send_and_wait(qtbot, window, "hello")
    transcript = window.chat.chat_view.transcript.toPlainText()
    assert "hello" in transcript
    assert "a question to the first model" not in transcript  # a new chat

    window.menus.models_action.trigger()
    models = window.findChild(ModelsDialog)
    assert isinstance(models, ModelsDialog)
    cells = [models.table.item(r, 2) for r in range(models.table.rowCount())]
    (ours,) = [c for c in cells if c.text() == f"{REPO} @ {COMMIT[:7]}"]
    assert f"file {FILE}, commit {COMMIT}" in ours.toolTip()
    models.close()


def test_an_unsupported_family_is_greyed_with_why_and_errors_are_one_line(
    qtbot,
    make_window: WindowFactory,
    fake_hub: FakeHub,  # noqa: F811
    hub_env: Path,  # noqa: F811
    tiny_gguf: Path,
    tiny_model_dir: Path,
    tmp_path: Path,
) -> None:
    _host(fake_hub, tiny_gguf, tmp_path)
    window = make_window(["--model", str(tiny_model_dir)])
    dialog = _open_dialog(window)
    _list_repo(qtbot, dialog, "Phi2")
    assert dialog.select_file("phi2-Q4_1.gguf")
    assert dialog.file_table.item(0, 3).text() == "unsupported"
    assert "Phi-2" in dialog.detail_label.text()
    assert not dialog.download_button.isEnabled()

    from tests.hub.fake_hub import Fault

    fake_hub.faults["search"] = Fault(status=429)
    dialog.search_edit.setText("anything")
    dialog.search_button.click()
    qtbot.waitUntil(lambda: "429" in dialog.message_label.text(), timeout=10_000)
    assert "\n" not in dialog.message_label.text()
    assert dialog.search_button.isEnabled()
    dialog.close()
