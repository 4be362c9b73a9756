"""Where the settings file lives: CHATAPP_SETTINGS, else beside CHATAPP_DATA_DIR's data."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.gui.common.settings import (
    SETTINGS_ENV,
    open_settings,
    remember_recent,
    settings_file,
    string_list,
)


def test_a_moved_data_folder_takes_its_settings_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(first))
    settings = open_settings()
    remember_recent(settings, "models/recent", "/models/a")
    settings.sync()
    assert settings_file() == first / "chatapp.ini"
    assert (first / "chatapp.ini").is_file()
    # A fresh data folder starts with fresh settings: nothing of the first run leaks in.
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(second))
    assert string_list(open_settings(), "models/recent") == []
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(first))
    assert string_list(open_settings(), "models/recent") == ["/models/a"]


def test_an_explicit_settings_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATAPP_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv(SETTINGS_ENV, str(tmp_path / "mine.ini"))
    assert settings_file() == tmp_path / "mine.ini"
    assert Path(open_settings().fileName()) == tmp_path / "mine.ini"


def test_without_either_variable_the_platform_place_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SETTINGS_ENV, raising=False)
    monkeypatch.delenv("CHATAPP_DATA_DIR", raising=False)
    path = settings_file()
    assert path.name == "chatapp.ini" and path.is_absolute()
