"""Where chatapp keeps its data (models, history). No Qt here: engine and store use it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV_VAR = "CHATAPP_DATA_DIR"


def data_dir() -> Path:
    """The user data folder; `CHATAPP_DATA_DIR` overrides the platform default."""
    override = os.environ.get(ENV_VAR)
    if override:
        return Path(override).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share"))
    return base / "chatapp"


def models_dir() -> Path:
    return data_dir() / "models"


def logs_dir() -> Path:
    return data_dir() / "logs"
