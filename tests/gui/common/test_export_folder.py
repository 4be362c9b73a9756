from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from chatapp.gui.common.export_folder import (
    EXPORT_FOLDER_KEY,
    export_folder,
    remember_export_folder,
)


@pytest.fixture
def settings(tmp_path: Path) -> QSettings:
    return QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)


def test_starts_at_home(settings: QSettings) -> None:
    assert export_folder(settings) == Path.home()


def test_remembers_a_file_s_folder_and_a_folder(settings: QSettings, tmp_path: Path) -> None:
    exports = tmp_path / "exports"
    exports.mkdir()
    remember_export_folder(settings, exports / "chat.md")
    assert export_folder(settings) == exports
    report = exports / "report"
    report.mkdir()
    remember_export_folder(settings, report)
    assert export_folder(settings) == report


def test_a_vanished_folder_falls_back_to_home(settings: QSettings, tmp_path: Path) -> None:
    settings.setValue(EXPORT_FOLDER_KEY, str(tmp_path / "gone"))
    assert export_folder(settings) == Path.home()


def test_reads_the_older_chat_export_setting(settings: QSettings, tmp_path: Path) -> None:
    settings.setValue("history/export_dir", str(tmp_path))
    assert export_folder(settings) == tmp_path
