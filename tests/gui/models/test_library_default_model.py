"""Issue 16's acceptance: opening the bundled GGUF twice in a fresh data folder makes one copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.convert.default_model import bundled_gguf
from chatapp.gui.main_window import MainWindow
from chatapp.gui.models.feature import ModelsFeature
from tests.gui.conftest import ANSWER_TIMEOUT_MS

pytestmark = pytest.mark.default_model


def test_the_bundled_gguf_opened_twice_is_converted_once(
    qtbot, make_window, default_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    models = tmp_path / "data" / "models"
    window = make_window(["--model", str(tmp_path / "none")])
    folders = []
    for _ in range(2):
        with qtbot.waitSignal(
            window.chat.controller.backend_session.events.model_loaded,
            timeout=2 * ANSWER_TIMEOUT_MS,
        ):
            assert models_feature(window).convert_and_open(bundled_gguf())
        folders.append(window.chat.controller.backend_session.model.folder)
    assert folders[0] == folders[1]
    assert [p.name for p in models.iterdir() if not p.name.startswith(".")] == [folders[0].name]
    dialog = models_feature(window).show_models_dialog()
    assert dialog.table.rowCount() == 1 and "(in use)" in dialog.table.item(0, 0).text()
    assert dialog.table.item(0, 3).text() == "Q4_1 (GGUF)"


def models_feature(window: MainWindow) -> ModelsFeature:
    feature = window.feature(ModelsFeature)
    assert feature is not None
    return feature
