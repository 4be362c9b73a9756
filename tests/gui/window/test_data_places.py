"""Help > Where is my data names the settings, history, models and log under the data folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox, QPushButton

from chatapp.gui.common.settings import SETTINGS_ENV
from chatapp.gui.window.data_places import data_places, show_data_places


def test_every_place_is_under_the_data_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    places = dict(data_places())
    assert set(places) == {"Settings", "Chat history", "Models", "Log"}
    assert places["Settings"] == tmp_path / "data" / "chatapp.ini"
    assert places["Models"] == tmp_path / "data" / "models"


def test_the_menu_shows_the_places_and_opens_the_folder(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    opened: list[Path] = []
    window.open_folder = lambda folder: opened.append(folder) or True
    window.data_places_action.trigger()
    box = window.findChild(QMessageBox, "dataPlacesDialog")
    assert box is not None and box.isVisible()
    text = box.text()
    assert str(tmp_path / "data" / "models") in text and "Settings" in text
    assert "Chat history" in text and "CHATAPP_DATA_DIR" in text
    button = next(b for b in box.findChildren(QPushButton) if b.text() == "Open data folder")
    button.click()
    assert opened == [tmp_path / "data"]
    box.close()
    assert show_data_places(window, opened.append).isVisible()


def test_without_a_file_manager_the_path_is_shown_to_copy(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PySide6.QtGui import QGuiApplication

    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    window = make_window(["--model", str(tiny_model_dir)], wait=False)
    window.open_folder = lambda _folder: False  # as QDesktopServices without xdg-open
    window.data_places_action.trigger()
    box = window.findChild(QMessageBox, "dataPlacesDialog")
    button = next(b for b in box.findChildren(QPushButton) if b.text() == "Open data folder")
    button.click()
    qtbot.waitUntil(lambda: window.findChild(QMessageBox, "dataFolderUnopened") is not None)
    said = window.findChild(QMessageBox, "dataFolderUnopened")
    assert said.isVisible() and str(tmp_path / "data") in said.text()
    assert "xdg-open" in said.text()
    copy = next(b for b in said.findChildren(QPushButton) if b.text() == "Copy path")
    copy.click()
    assert QGuiApplication.clipboard().text() == str(tmp_path / "data")
