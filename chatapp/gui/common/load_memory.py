"""What the window remembers of loading models, in its settings: the last model used, which
the next start opens again, how long each model took to load (the status bar's time left) and
the precision chosen for each model. The chat's loading (gui/chat/loading.py) writes them; the
startup (gui/app.py) reads the first."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QSettings

from chatapp.engine.guards import PRECISIONS, default_precision

LAST_FOLDER_KEY = "models/last_folder"
LAST_ONNX_KEY = "models/last_onnx_file"


# ---- the last model used --------------------------------------------------------------------
def remember_last_model(settings: QSettings, folder: Path, onnx_file: str) -> None:
    settings.setValue(LAST_FOLDER_KEY, str(folder))
    settings.setValue(LAST_ONNX_KEY, onnx_file)


def last_model(settings: QSettings) -> tuple[Path, str | None] | None:
    """The folder (and graph) used last, if it is still there."""
    folder = str(settings.value(LAST_FOLDER_KEY, "") or "")
    if not folder or not Path(folder).is_dir():
        return None
    onnx_file = str(settings.value(LAST_ONNX_KEY, "") or "")
    return Path(folder), onnx_file or None


# ---- how long loading took ---------------------------------------------------------------------
LOAD_SECONDS_KEY = "models/load_seconds"
KEEP_LOAD_TIMES = 20  # models remembered; the oldest is forgotten first


def load_key(folder: Path, onnx_file: str | None, device: str) -> str:
    """What a load time is kept under: the same graph of the same folder on the same device."""
    return f"{folder.expanduser().resolve()}|{onnx_file or ''}|{device}"


def last_load_seconds(settings: QSettings, key: str) -> float | None:
    """How long the last load of `key` took, if one finished before."""
    seconds = _load_times(settings).get(key)
    return seconds if isinstance(seconds, int | float) and seconds > 0 else None


def remember_load_seconds(settings: QSettings, key: str, seconds: float) -> None:
    times = _load_times(settings)
    times.pop(key, None)
    times[key] = round(seconds, 2)
    kept = dict(list(times.items())[-KEEP_LOAD_TIMES:])
    settings.setValue(LOAD_SECONDS_KEY, json.dumps(kept))


def _load_times(settings: QSettings) -> dict[str, object]:
    return _json_dict(settings, LOAD_SECONDS_KEY)


# ---- the precision chosen for each model -------------------------------------------------------
PRECISION_KEY = "models/precision"
KEEP_PRECISIONS = 50  # models remembered; the oldest choice is forgotten first


def model_key(folder: Path) -> str:
    """What a model's choices are kept under: its folder, wherever it was opened from."""
    return str(folder.expanduser().resolve())


def remembered_precision(settings: QSettings, folder: Path) -> str:
    """The precision chosen for `folder` last (guards.PRECISIONS), else the default
    (guards.default_precision: CHATAPP_GGUF_PRECISION where it names one)."""
    precision = _json_dict(settings, PRECISION_KEY).get(model_key(folder))
    return (
        precision if isinstance(precision, str) and precision in PRECISIONS else default_precision()
    )


def remember_precision(settings: QSettings, folder: Path, precision: str) -> None:
    choices = _json_dict(settings, PRECISION_KEY)
    choices.pop(model_key(folder), None)
    choices[model_key(folder)] = precision
    kept = dict(list(choices.items())[-KEEP_PRECISIONS:])
    settings.setValue(PRECISION_KEY, json.dumps(kept))


def _json_dict(settings: QSettings, key: str) -> dict[str, object]:
    try:
        value = json.loads(str(settings.value(key, "") or "{}"))
    except ValueError:  # a hand-edited or damaged settings file: start again
        return {}
    return value if isinstance(value, dict) else {}
