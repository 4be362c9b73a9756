"""SIGTERM while the window prepares the default model (issue 37): the window quits as closing
does, the conversion stops and removes its `.partial` folder, and the process exits cleanly.

The real app runs in a child process; its first-run conversion writes its partial folder, then
keeps reporting progress (as a long conversion does) until it is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

CHILD = """
import sys, time
from pathlib import Path
from chatapp.convert import converter, default_model
from chatapp.gui import app

default_model.bundled_gguf = lambda: Path(sys.argv[1])

def hanging_write(src, tmp, opts, graphs, report):
    (tmp / "model.onnx.data").write_bytes(b"half")
    print("hanging", flush=True)
    for _ in range(3000):  # 5 minutes at most; a stop ends it through `report`
        report(0.5, "layers")
        time.sleep(0.1)

converter._write_folder = hanging_write
sys.exit(app.main([]))
"""


@pytest.mark.skipif(not hasattr(signal, "SIGTERM") or sys.platform == "win32", reason="POSIX")
def test_sigterm_while_preparing_the_default_model_leaves_no_partial_folder(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "QT_QPA_PLATFORM": "offscreen",
        "CHATAPP_DATA_DIR": str(tmp_path / "data"),
        "CHATAPP_SETTINGS": str(tmp_path / "settings.ini"),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(tiny_gguf)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "hanging"
        models = tmp_path / "data" / "models"
        assert [p.name for p in models.iterdir() if ".partial-" in p.name]
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == 0, err
    assert "Traceback" not in err
    assert list(models.iterdir()) == []
