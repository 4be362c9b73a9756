"""`chatapp --quit-after-ms N`: the real app starts, shows its window, and exits cleanly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_app_shows_its_window_and_quits(tiny_model_dir: Path, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "CHATAPP_DATA_DIR": str(tmp_path),
        "CHATAPP_SETTINGS": str(tmp_path / "settings.ini"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "chatapp", "--model", str(tiny_model_dir), "--quit-after-ms", "800"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "chatapp: window shown (" in out.stderr
    assert "Traceback" not in out.stderr
