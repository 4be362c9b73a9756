"""The window and a weight file cut short while it answers (issue 48, cause 1; serve's case is
tests/server/test_mapped_file_truncated.py): the answer ends with one line naming the file,
the window goes on, and nothing dies by SIGBUS, with read leases and where none can be had
(the native SIGBUS net). In a child process: without both the cut kills the process, which
must fail this test rather than end pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.folder_format.native_library import sigbus_net
from tests.engine.test_memory import with_external_data

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="leases: Linux")
ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, os, sys, time
from pathlib import Path
from PySide6.QtCore import QCoreApplication, QEventLoop
from PySide6.QtWidgets import QApplication
from chatapp.engine import mapped_weights
from chatapp.engine.mapped_weights import install_signal
from chatapp.engine.loops import KVLoop
from chatapp.gui.chat.controller import State
from tests.gui.conftest import greedy, open_loaded_window, set_sampling
from tests.server.slow_pass_cli import _slowed, no_lease

folder, cut_to, leases = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "leases"
data = folder / "model.onnx.data"
install_signal()  # as chatapp's command line does first thing
if not leases:  # as for another user's file or on NFS
    mapped_weights._lease = no_lease
KVLoop._forward_ids = _slowed(KVLoop._forward_ids)  # 50 ms inside each pass
app = QApplication([])
window = open_loaded_window(folder)
set_sampling(window, greedy(400))
controller = window.chat.controller
batches, failures = [], []
controller.chat.events.answer_delta.connect(lambda batch: batches.append(batch))
controller.chat.events.answer_failed.connect(lambda message, _prompt: failures.append(message))

def spin_until(done, seconds):
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.005)
    return done()

window.chat.chat_view.set_prompt_text("hi")
window.chat.chat_view.send_button.click()
assert spin_until(lambda: len(batches) >= 3, 60), "no tokens"
generating = controller.backend_session.state is State.GENERATING
started = time.monotonic()
os.truncate(data, int(data.stat().st_size * cut_to))  # waits for the running pass
waited = time.monotonic() - started
spin_until(lambda: failures and controller.backend_session.state is State.READY, 60)
answer = window.chat.conversation.messages[-1]
print(json.dumps({
    "generating": generating, "waited": waited, "failures": failures,
    "state": controller.backend_session.state.name, "banner": window.banner.text(),
    "finish": answer.figures.finish_reason if answer.figures else None,
}))
sys.stdout.flush()
os._exit(0)  # the window's worker threads need no orderly end here
"""


@pytest.mark.parametrize(
    ("cut_to", "leases"), [(0.5, True), (0.0, True), (0.5, False), (0.0, False)]
)
def test_a_weight_file_cut_short_mid_answer_ends_the_answer_not_the_window(
    tiny_model_dir: Path, tmp_path: Path, cut_to: float, leases: bool
) -> None:
    if not leases and sigbus_net() is None:
        pytest.skip("the native library (its SIGBUS net) is not built")
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "CHATAPP_DATA_DIR": str(tmp_path / "data"),
        "CHATAPP_SETTINGS": str(tmp_path / "settings.ini"),
        "CHATAPP_PACKED_CACHE": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), str(cut_to), "leases" if leases else "none"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"the window died ({done.returncode}): {done.stderr[-3000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["generating"], "the answer ended before the cut: nothing was tested"
    assert result["waited"] < 10  # let through at the end of the running pass
    (failure,) = result["failures"]
    assert "model.onnx.data" in failure and "\n" not in failure
    assert result["state"] == "READY" and result["finish"] == "error"
    assert "model.onnx.data" in result["banner"]
