"""A model's weight file cut short while `chatapp serve` answers from it (issue 48, cause 1):
the process must not die by SIGBUS. The server holds a read lease on each mapped file
(engine/mapped_weights.py): the truncation waits until the running step ends, the answer ends
with one line naming the file, and the server goes on answering (with that line). Where no
lease can be had the native SIGBUS net gives the cut pages as zeros and the answer ends the
same way."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest
from pytest import MonkeyPatch

from chatapp.folder_format.native_library import sigbus_net
from tests.engine.test_memory import with_external_data
from tests.server.test_serve_command import serve_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="leases: Linux")
QUESTION = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("cut_to", "leases"), [(0.5, True), (0.0, True), (0.5, False), (0.0, False)]
)
def test_a_weight_file_cut_short_mid_answer_ends_the_answer_not_the_server(
    tiny_model_dir: Path, tmp_path: Path, cut_to: float, leases: bool, monkeypatch: MonkeyPatch
) -> None:
    if not leases:  # as for another user's file or on NFS: only the SIGBUS net is left
        if sigbus_net() is None:
            pytest.skip("the native library (its SIGBUS net) is not built")
        monkeypatch.setenv("CHATAPP_TEST_NO_LEASES", "1")
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    data = folder / "model.onnx.data"
    process, info = serve_process(
        "--model", str(folder), "--threads", "1", module="tests.server.slow_pass_cli"
    )
    try:
        lines: list[str] = []
        three_tokens = threading.Event()

        def read_stream() -> None:
            body = {"messages": QUESTION, "stream": True, "max_tokens": 400}
            with httpx2.stream(
                "POST", f"{info['url']}/chat/completions", json=body, timeout=60, trust_env=False
            ) as response:
                for line in response.iter_lines():
                    lines.append(line)
                    if sum('"content"' in seen for seen in lines) >= 3:
                        three_tokens.set()

        reader = threading.Thread(target=read_stream)
        reader.start()
        assert three_tokens.wait(60), lines
        started = time.monotonic()
        os.truncate(data, int(data.stat().st_size * cut_to))  # waits for the running step
        waited = time.monotonic() - started
        reader.join(60)
        assert not reader.is_alive()
        assert process.poll() is None, process.communicate()[1][-3000:]  # alive: no SIGBUS
        assert waited < 10  # let through within a step, not the kernel's 45 s
        errors = [line for line in lines if '"error"' in line]
        assert len(errors) == 1 and "model.onnx.data" in errors[0], lines[-3:]
        after = httpx2.post(
            f"{info['url']}/chat/completions",
            json={"messages": QUESTION, "max_tokens": 4},
            timeout=60,
            trust_env=False,
        )
        assert after.status_code in (400, 500) and "model.onnx.data" in after.text
        assert "\n" not in after.json()["error"]["message"]
        assert process.poll() is None
    finally:
        process.kill()
        process.communicate(timeout=30)
