"""Devices in the window: the transfer figure, a device failing mid-answer, the WebGPU offer."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from chatapp.engine.devices import Device, DeviceError, find_device, software_offer_problem
from chatapp.gui.chat.controller import State
from chatapp.session import formatting as fmt
from chatapp.units import fmt_bytes
from tests.gui.conftest import ANSWER_TIMEOUT_MS, greedy, send_and_wait, set_sampling


def test_on_the_cpu_nothing_crosses_and_the_panel_says_why(
    qtbot, make_window, varied_model_dir: Path
) -> None:
    window = make_window(["--model", str(varied_model_dir)])
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "hello")
    panel = window.chat.side_panel
    assert panel.figures_box.transfer_value.text() == "0 B"
    assert panel.figures_box.answer_label.text() == "Last answer: IO-Binding · CPU"
    note = panel.figures_box.transfer_note.text()
    # Why the cached loops are close here, and what IO-Binding would save on a device: the
    # model's KV bytes per token x the answer's context, down and back up.
    assert "stays in the computer's memory" in note and "noise" in note
    figures = window.chat.conversation.messages[-1].figures
    saved = 2 * window.host.engine.info.kv_bytes_per_token() * figures.tokens_read
    assert f"about {fmt_bytes(saved)} per token" in note
    assert f"({figures.tokens_read} tokens in its KV cache)" in note
    assert "host↔device" not in fmt.figures_line(window.chat.conversation.messages[-1].figures)


def test_a_device_with_its_own_memory_shows_bytes_per_token(
    qtbot, make_window, varied_model_dir: Path, emulated_device: Device
) -> None:
    window = make_window(["--model", str(varied_model_dir)])
    assert window.chat.controller.backend_session.model.device_own_memory
    assert "Emulated GPU" in window.chat.side_panel.figures_box.transfer_note.text()
    set_sampling(window, greedy(8))
    warm_ups: list[object] = []
    window.chat.controller.chat.events.warm_up.connect(warm_ups.append)
    box = window.chat.side_panel.figures_box
    for mode_button in ("modeNaiveButton", "modeIOBindingButton"):
        window.findChild(object, mode_button).click()
        send_and_wait(qtbot, window, f"via {mode_button}")
        # Each loop's first answer on the device warms it up first, shown beside the answer.
        assert warm_ups and warm_ups[-1].finished
        assert box.warm_up_note.isVisible() and "not counted" in box.warm_up_note.text()
        warm_ups.clear()
    send_and_wait(qtbot, window, "warm already")
    assert not warm_ups and not box.warm_up_note.isVisible()
    naive, iob, _warm = (m.figures for m in window.chat.conversation.messages[1::2])
    # The naive loop moves every layer's KV both ways; IO-Binding the token, mask and logits.
    assert naive.mode == "naive" and iob.mode == "iobinding"
    assert naive.h2d_bytes_per_token > 10 * iob.h2d_bytes_per_token > 0
    assert iob.d2h_bytes_per_token == 4 * window.host.engine.info.vocab_size
    assert window.chat.side_panel.figures_box.transfer_value.text() != "0 B"
    assert "host↔device" in fmt.figures_line(iob)


def test_a_device_failing_mid_answer_falls_back_to_the_cpu_and_keeps_the_chat(
    qtbot, make_window, varied_model_dir: Path, emulated_device: Device, monkeypatch
) -> None:
    window = make_window(["--model", str(varied_model_dir)])
    set_sampling(window, greedy(30))
    send_and_wait(qtbot, window, "first question")
    real_run = ort.InferenceSession.run_with_iobinding
    calls = {"n": 0}

    model_session = window.host.engine.session

    def failing(session, binding, *rest):
        if session is model_session:  # the model's runs, not the log-probabilities' session
            calls["n"] += 1
            if calls["n"] > 5:
                raise RuntimeError("VK_ERROR_DEVICE_LOST")
        return real_run(session, binding, *rest)

    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", failing)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=ANSWER_TIMEOUT_MS
    ) as loaded:
        window.chat.chat_view.set_prompt_text("second question")
        window.chat.chat_view.send_button.click()
    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", real_run)
    assert (
        loaded.args[0].device == "cpu" and "VK_ERROR_DEVICE_LOST" in loaded.args[0].fallback_reason
    )
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=10_000
    )
    messages = window.chat.conversation.messages
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[-1].figures.finish_reason == "error"  # what streamed before is kept
    assert "VK_ERROR_DEVICE_LOST" in window.banner.text() and "CPU" in window.banner.text()
    # The failed answer's figures stay, with its own device's name and words: the CPU loaded
    # since then answers next.
    panel = window.chat.side_panel
    assert panel.device() == "cpu" and panel.figures_box.transfer_value.text() != "0 B"
    assert "emulated" in panel.figures_box.answer_label.text()
    assert (
        "Emulated GPU" not in panel.figures_box.transfer_note.text()
    )  # the device it ran on is gone
    send_and_wait(qtbot, window, "third question")
    assert (
        panel.figures_box.transfer_value.text() == "0 B"
        and "CPU" in panel.figures_box.answer_label.text()
    )
    assert messages[-1].figures.device == "cpu" and messages[-1].figures.finish_reason != "error"
    assert len(messages) == 6


def test_the_webgpu_software_adapter_is_offered_and_runs(
    qtbot, make_window, varied_model_dir: Path
) -> None:
    window = make_window(["--model", str(varied_model_dir)])
    qtbot.waitUntil(lambda: window.chat.side_panel.devices_known, timeout=ANSWER_TIMEOUT_MS)
    selector = window.chat.side_panel.device_selector
    names = [selector.itemData(i) for i in range(selector.count())]
    if "webgpu" in names:
        pytest.skip("a hardware WebGPU adapter is offered here instead")
    if "webgpu-software" not in names:
        pytest.skip(f"the WebGPU software adapter is not offered here: {software_offer_problem()}")
    assert "software" in selector.itemText(names.index("webgpu-software"))
    try:
        find_device("webgpu-software")
    except DeviceError as exc:
        pytest.skip(f"WebGPU cannot be set up here: {exc}")
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=60_000
    ) as loaded:
        selector.setCurrentIndex(names.index("webgpu-software"))
    assert loaded.args[0].device == "webgpu-software", loaded.args[0].fallback_reason
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "on the software adapter")
    figures = window.chat.conversation.messages[-1].figures
    assert figures.device == "webgpu-software" and figures.transfer_bytes_per_token > 0
