"""Work that is not generation runs on the window's tool thread: it goes on while an answer
holds the engine's thread, and never blocks the GUI thread."""

from __future__ import annotations

import threading
from pathlib import Path

from chatapp.engine.devices import CPU
from chatapp.gui.chat.controller import State
from chatapp.session.model_jobs import (
    ConvertRequest,
    convert_job,
    device_probe_job,
    variants_job,
)
from tests.gui.conftest import ANSWER_TIMEOUT_MS, greedy, send_and_wait, set_sampling
from tests.serving import slow_down


def test_a_conversion_a_graph_reading_and_the_device_probe_finish_while_an_answer_waits(
    qtbot, make_window, tiny_model_dir: Path, tiny_gguf: Path, tmp_path: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    gate = threading.Event()  # the answer's every step waits for it (at most 30 s)
    engine = window.host.engine
    assert engine is not None
    undo = slow_down(engine, 0.0, gate)
    try:
        set_sampling(window, greedy(4))
        window.chat.chat_view.set_prompt_text("hello")
        window.chat.chat_view.send_button.click()
        assert window.chat.controller.backend_session.state is State.GENERATING
        jobs = {
            "conversion": convert_job(ConvertRequest(tiny_gguf, tmp_path / "converted")),
            "graphs": variants_job(tiny_model_dir),
            "probe": device_probe_job(),
        }
        results: dict[str, object] = {}
        for name, job in jobs.items():
            handle = window.tools.submit(job)
            with qtbot.waitSignal(handle.sig_finished, timeout=ANSWER_TIMEOUT_MS) as done:
                pass
            results[name] = done.args[0]
            # On the engine's queue these would wait for the answer, which waits for the gate.
            assert window.chat.controller.backend_session.state is State.GENERATING, name
        assert results["conversion"] == tmp_path / "converted"
        assert (tmp_path / "converted" / "model.onnx").is_file()
        assert [v.path for v in results["graphs"]] == ["model.onnx"]
        assert results["probe"][-1] is CPU
    finally:
        gate.set()
        undo()
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY,
        timeout=ANSWER_TIMEOUT_MS,
    )
    assert window.chat.conversation.messages[-1].role == "assistant"


def test_the_device_list_arrives_from_the_probe_and_keeps_the_choice(
    qtbot, make_window, tiny_model_dir: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    panel = window.chat.side_panel
    qtbot.waitUntil(lambda: panel.devices_known, timeout=ANSWER_TIMEOUT_MS)
    names = [panel.device_selector.itemData(i) for i in range(panel.device_selector.count())]
    assert (
        names[-1] == "cpu" and panel.device() == window.chat.controller.backend_session.model.device
    )
    set_sampling(window, greedy(3))
    send_and_wait(qtbot, window, "hello")  # the list arriving asked for no reload
    assert window.chat.controller.backend_session.model.device == panel.device()
