"""File > Models, the last model reopening at start, and the load times kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.gui.common.load_memory import LAST_FOLDER_KEY, last_model
from chatapp.gui.main_window import MainWindow
from chatapp.gui.models.feature import ModelsFeature
from chatapp.gui.models.library import ModelsDialog
from tests.gui.conftest import ANSWER_TIMEOUT_MS


@pytest.fixture
def models(tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder whose library holds the tiny model and a hand-made ONNX folder."""
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "data" / "models"
    convert_gguf(tiny_gguf, folder / "tiny-llama", ConvertOptions())
    (folder / "hand-made").mkdir()
    (folder / "hand-made" / "model_fp16.onnx").write_bytes(b"x" * 4096)
    return folder


def test_the_dialog_lists_opens_and_removes(qtbot, models: Path) -> None:
    dialog = ModelsDialog(models, in_use=models / "tiny-llama")
    qtbot.addWidget(dialog)
    table = dialog.table
    assert table.rowCount() == 2
    rows = {table.item(r, 0).text(): [table.item(r, c).text() for c in range(4)] for r in range(2)}
    tiny = rows["tiny-llama  (in use)"]
    assert tiny[2] == "tiny-llama.gguf" and "GGUF" in tiny[3] and tiny[1].endswith("B")
    assert rows["hand-made"][2:] == ["ONNX folder", "fp16"]
    dialog.select("tiny-llama")
    assert dialog.open_button.isEnabled() and not dialog.remove_button.isEnabled()
    opened: list[Path] = []
    dialog.sig_open.connect(opened.append)
    dialog.open_button.click()
    assert opened == [models / "tiny-llama"]
    dialog.select("hand-made")
    questions: list[str] = []
    dialog.confirm = lambda q: questions.append(q) or False
    dialog.remove_button.click()
    assert (models / "hand-made").is_dir() and "did not make this folder" in questions[0]
    dialog.confirm = lambda _q: True
    dialog.remove_button.click()
    assert not (models / "hand-made").exists() and table.rowCount() == 1
    assert "Removed hand-made" in dialog.message_label.text()


def test_empty_library_says_so(qtbot, tmp_path: Path) -> None:
    dialog = ModelsDialog(tmp_path / "nothing", in_use=None)
    qtbot.addWidget(dialog)
    assert dialog.table.rowCount() == 0 and "No prepared models" in dialog.message_label.text()
    assert not dialog.open_button.isEnabled()


def test_file_models_opens_the_chosen_model_and_it_reopens_next_start(
    qtbot, make_window, models: Path, tiny_model_dir: Path, settings_file: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    dialog = models_feature(window).show_models_dialog()
    dialog.select("tiny-llama")
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=ANSWER_TIMEOUT_MS
    ):
        dialog.open_button.click()
    assert window.chat.controller.backend_session.model.folder == models / "tiny-llama"
    window.close()
    saved = QSettings(str(settings_file), QSettings.Format.IniFormat)
    assert saved.value(LAST_FOLDER_KEY) == str(models / "tiny-llama")
    # No graph was named: the next start lets the device choose (a folder's native graph on the
    # CPU, its stock one elsewhere) rather than pinning the one this device ran.
    assert last_model(saved) == (models / "tiny-llama", None)
    again = make_window([])  # no --model: the last one, not the default model
    assert again.chat.controller.backend_session.model.folder == models / "tiny-llama"


def models_feature(window: MainWindow) -> ModelsFeature:
    feature = window.feature(ModelsFeature)
    assert feature is not None
    return feature
