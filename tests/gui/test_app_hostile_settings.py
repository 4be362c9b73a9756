"""The settings file is input too: whatever a value holds (huge numbers, the wrong type, a
path elsewhere, deep JSON, megabytes of text), the window starts with that value's default,
and a link planted at the file's name is never written through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings

from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.chat.controller import State
from chatapp.gui.common.export_folder import export_folder
from chatapp.gui.common.load_memory import (
    LOAD_SECONDS_KEY,
    last_load_seconds,
    last_model,
    load_key,
    remembered_precision,
)
from chatapp.gui.common.settings import (
    SettingsGuard,
    read_flag,
    read_float,
    read_int,
    read_json_object,
    string_list,
)
from chatapp.gui.remote.dialog import saved_keys
from chatapp.gui.remote.serve_dialog import remembered_port, remembered_slots

KEYS = (
    "window/geometry", "window/splitter", "view/conversation_list", "view/side_panel",
    "view/theme", "models/recent", "models/last_folder", "models/last_onnx_file",
    "models/load_seconds", "models/precision", "export/last_folder", "history/export_dir",
    "history/last_chat", "sampling/max_new_tokens", "sampling/seed", "sampling/json_answer",
    "sampling/json_schema", "sampling/stops", "engine/mode", "engine/device", "engine/threads",
    "chat/system_prompt", "serving/port", "serving/slots", "remote/recent", "remote/saved_keys",
    "sampling/overrides/temperature", "sampling/overrides/top_k", "sampling/overrides/top_p",
    "sampling/overrides/repetition_penalty", "sampling/overrides/saved", "sampling/top_k",
)  # fmt: skip
HOSTILE = {
    "a huge integer": "99999999999999999999999999",
    "minus a huge integer": "-99999999999999999999",
    "infinity": "inf",
    "minus infinity": "-inf",
    "not a number": "nan",
    "1e308": "1e308",
    "a list": "a, b, c",
    "bytes": "@ByteArray(\\x1\\x2garbage)",
    "a serialized variant": "@Variant(\\0\\0\\0\\x7f\\0\\0\\0\\nQByteArray\\0\\xff\\xff\\xff\\xf0)",
    "an invalid variant": "@Invalid()",
    "a rectangle": "@Rect(0 0 99999999 99999999)",
    "3 MB of text": "x" * 3_000_000,
    "a path outside": "/etc",
    "a relative path": "../../../..",
    "deep JSON": "[" * 50_000 + "]" * 50_000,
    "a NUL": "a\\0b",
}


def _write(path: Path, value: str) -> None:
    groups: dict[str, list[str]] = {}
    for key in KEYS:
        group, _, rest = key.partition("/")
        groups.setdefault(group, []).append(f"{rest}={value}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"[{g}]\n" + "\n".join(kv) + "\n" for g, kv in groups.items()))


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_window_starts_on_a_hostile_value_in_every_key(
    qtbot, make_window, settings_file: Path, tmp_path: Path, name: str
) -> None:
    _write(settings_file, HOSTILE[name])
    window = make_window(["--model", str(tmp_path / "unused")])
    box = window.chat.side_panel.sampling_box
    assert box.max_tokens_spin.value() == SamplingSettings().max_new_tokens
    assert box.seed_spin.value() == -1
    assert window.chat.side_panel.threads_spin.value() == 0
    assert len(window.chat.system_prompt()) <= 200_000  # 3 MB of text: none
    assert box.json_answer.schema_edit.length() <= 200_000
    settings = window.settings
    assert last_model(settings) is None or last_model(settings)[0] == Path("/etc")
    assert export_folder(settings).is_absolute()
    assert 0 <= remembered_port(settings) <= 65535 and 1 <= remembered_slots(settings) <= 8
    assert remembered_precision(settings, tmp_path) in ("fast", "exact")
    assert all(isinstance(v, str) for v in saved_keys(settings).values())
    window.menus.rebuild_recent_menu()
    window.close()  # writes the window's place back; the next start reads the same defaults
    again = QSettings(str(settings_file), QSettings.Format.IniFormat)
    tokens = SamplingSettings().max_new_tokens
    assert read_int(again, "sampling/max_new_tokens", tokens, 1, 8192) == tokens


def test_the_readers_take_only_values_in_range(settings_file: Path) -> None:
    settings = QSettings(str(settings_file), QSettings.Format.IniFormat)
    for value, expected in (
        ("42", 42), (42, 42), ("42.0", 42), ("4e1", 40), ("-3", 5), ("9" * 30, 5),
        ("inf", 5), ("nan", 5), ("0x10", 5), (True, 5), (["1"], 5), ("", 5), (4.5, 5),
    ):  # fmt: skip
        settings.setValue("n", value)
        assert read_int(settings, "n", 5, 0, 100) == expected, value
    for value, expected_float in (("0.5", 0.5), ("inf", None), ("2", None), (True, None)):
        settings.setValue("f", value)
        assert read_float(settings, "f", 0.0, 1.0) == expected_float, value
    for value, flag in (("true", True), ("NO", False), ("maybe", True), (0, True)):
        settings.setValue("b", value)
        assert read_flag(settings, "b", True) is flag, value
    settings.setValue("j", "[" * 100_000 + "]" * 100_000)
    assert read_json_object(settings, "j") == {}
    settings.setValue("j", '{"a": 1}')
    assert read_json_object(settings, "j") == {"a": 1}
    settings.setValue("l", ["/a", "", "x" * 5000, "b\0c", "/d"] + ["/e"] * 20)
    assert string_list(settings, "l") == ["/a", "/d", "/e", "/e", "/e", "/e", "/e", "/e"]


def test_a_link_at_the_settings_file_is_moved_aside_and_never_written_through(
    qtbot, make_window, settings_file: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    victim = tmp_path / "precious.txt"
    victim.write_text("[keep]\nmine=1\n")
    settings_file.parent.mkdir(parents=True, exist_ok=True)
    settings_file.symlink_to(victim)
    window = make_window(["--model", str(tmp_path / "unused")])
    # Said in the banner (here the missing model's line follows it) and the log.
    assert f"The settings file {settings_file} was moved aside to chatapp.ini.not-a-file-" in (
        caplog.text
    )
    assert ": it is a link to another file." in caplog.text
    assert "keep/mine" not in window.settings.allKeys()  # nothing read through it either
    window.chat.side_panel.sampling_box.seed_spin.setValue(7)
    window.close()
    assert victim.read_text() == "[keep]\nmine=1\n"
    assert settings_file.is_file() and not settings_file.is_symlink()
    assert [p.name for p in settings_file.parent.iterdir() if ".not-a-file-" in p.name]


def test_a_link_planted_while_the_window_runs_is_not_written_through(
    qtbot, make_window, settings_file: Path, tmp_path: Path
) -> None:
    window = make_window(["--model", str(tmp_path / "unused")])
    window.settings.setValue("probe", 1)
    window.settings.sync()
    victim = tmp_path / "precious.txt"
    victim.write_text("mine\n")
    os.replace(settings_file, tmp_path / "old.ini")
    settings_file.symlink_to(victim)
    window.chat.side_panel.sampling_box.seed_spin.setValue(11)  # saved at once
    qtbot.waitUntil(lambda: not settings_file.is_symlink(), timeout=5000)
    assert victim.read_text() == "mine\n"
    assert "was moved aside" in window.banner.text()
    guard = window.settings.findChild(SettingsGuard)
    assert guard is not None and guard.may_write()
    window.close()
    assert victim.read_text() == "mine\n"
    assert (
        read_int(
            QSettings(str(settings_file), QSettings.Format.IniFormat), "sampling/seed", 0, -1, 99
        )
        == 11
    )


@pytest.mark.parametrize("seconds", ["Infinity", "1e308", "-1", "NaN", "true", '"10"'])
def test_a_remembered_load_time_out_of_range_is_not_used(
    qtbot, make_window, settings_file: Path, tiny_model_dir: Path, seconds: str
) -> None:
    """A load time of JSON's Infinity overflowed the time left shown while the model loads."""
    key = load_key(tiny_model_dir, None, "cpu")
    settings = QSettings(str(settings_file), QSettings.Format.IniFormat)
    settings.setValue(LOAD_SECONDS_KEY, '{"%s": %s}' % (key, seconds))  # noqa: UP031
    settings.sync()
    assert last_load_seconds(settings, key) is None
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    assert 0 < last_load_seconds(window.settings, key) < 60  # the real one, now
