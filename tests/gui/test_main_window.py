"""The whole window on the tiny test model: streaming, figures, loop toggle, stop, faults."""

from __future__ import annotations

import gc
import re
import shutil
import time
import weakref
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel, QProgressDialog, QPushButton

from chatapp.engine import loops, model_description
from chatapp.engine.devices import available_devices
from chatapp.engine.engine import Engine
from chatapp.gui.chat.controller import State
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.main_window import MainWindow
from chatapp.gui.models.feature import ModelsFeature
from chatapp.session import model_jobs
from chatapp.session.formatting import figures_line
from chatapp.session.model_jobs import ModelSummary
from tests.gui.conftest import (
    ANSWER_TIMEOUT_MS,
    counted_transcript,
    greedy,
    send_and_wait,
    set_sampling,
)


@pytest.fixture
def slow_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny model writes ~4000 tokens/s; give each step a few ms so that an answer lasts
    long enough to be stopped or interrupted by the test."""
    original = loops.KVLoop.forward

    def slow_forward(self, new_ids, all_logits=False, rows=None):
        time.sleep(0.004)
        return original(self, new_ids, all_logits, rows)

    monkeypatch.setattr(loops.KVLoop, "forward", slow_forward)


def _figure(window: MainWindow, name: str) -> str:
    label = window.findChild(QLabel, name)
    assert label is not None, name
    return label.text()


def test_required_object_names(make_window, tiny_model_dir: Path) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    for name in (
        "promptEdit",
        "sendButton",
        "stopButton",
        "transcriptView",
        "modeNaiveButton",
        "modeIOBindingButton",
        "deviceSelector",
        "tokensPerSecondValue",
        "ttftValue",
        "perplexityValue",
    ):
        assert window.findChild(object, name) is not None, name


def test_send_streams_tokens_and_updates_figures(qtbot, make_window, tiny_model_dir) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    assert _figure(window, "tokensPerSecondValue") == "–"
    assert window.chat.side_panel.figures_box.context_value.text() == "0 / 512"
    set_sampling(window, greedy(40))
    deltas = []
    window.chat.controller.chat.events.answer_delta.connect(deltas.append)
    send_and_wait(qtbot, window, "hello there")
    assert sum(len(b.token_ids) for b in deltas) == 40
    conv = window.chat.conversation
    assert [m.role for m in conv.messages] == ["user", "assistant"]
    figures = conv.messages[-1].figures
    assert figures is not None and figures.finish_reason == "length"
    assert figures.mode == "iobinding" and figures.generated_tokens == 40
    assert float(_figure(window, "tokensPerSecondValue")) > 0
    assert float(_figure(window, "ttftValue")) >= 0
    # A random-weight model may find its text absurdly unlikely: "> 1,000" then.
    for text in (
        _figure(window, "perplexityValue"),
        window.chat.side_panel.figures_box.prompt_perplexity_value.text(),
    ):
        assert text == "> 1,000" or 1 <= float(text) < 1000, text
    # Cut at the limit: the 40th token was written but never read back into the cache.
    used = figures.prompt_tokens + 39
    assert figures.tokens_read == used
    shown = window.chat.side_panel.figures_box.context_value.text()
    if shown != f"{used} / 512":
        # On a busy machine the measurement of the next prompt (the answer re-tokenized as
        # text, plus the template) may already have replaced the live figure: it says so.
        sent = shown.split(" / ")[0]
        assert window.chat.side_panel.figures_box.context_value.toolTip().startswith(
            f"{sent} of 512 tokens sent"
        )
    assert (
        window.chat.side_panel.figures_box.latency_chart.point_count == 39
    )  # decode steps after the first
    text = counted_transcript(qtbot, window, messages=2)
    assert "hello there" in text
    # Counted: the answer's tokens are on its header, the figure line says why it ended.
    assert re.search(r"^Assistant\s+\d+ tokens of context\b", text, re.MULTILINE)
    line = text.splitlines()[-1]
    assert "IO-Binding · CPU ·" in line and line.endswith("· hit the token limit")
    assert window.chat.chat_view.prompt_text() == ""
    assert window.chat.chat_view.regenerate_button.isEnabled()


def test_loop_toggle_gives_the_same_greedy_answer(qtbot, make_window, tiny_model_dir) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(24))
    assert window.chat.side_panel.mode() == "iobinding"
    send_and_wait(qtbot, window, "same prompt")
    first = window.chat.conversation.messages[-1]
    window.findChild(QPushButton, "modeNaiveButton").click()
    assert window.chat.side_panel.mode() == "naive"
    window.chat.chat_view.new_chat_button.click()
    assert window.chat.conversation.messages == []
    send_and_wait(qtbot, window, "same prompt")
    second = window.chat.conversation.messages[-1]
    assert first.figures.mode == "iobinding" and second.figures.mode == "naive"
    assert second.content == first.content
    assert second.figures.perplexity == pytest.approx(first.figures.perplexity, rel=1e-4)
    # Regenerate with the other loop again: still the same answer, no duplicate messages.
    window.findChild(QPushButton, "modeIOBindingButton").click()
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.regenerate_button.click()
    assert len(window.chat.conversation.messages) == 2
    assert window.chat.conversation.messages[-1].content == first.content


def test_stop_mid_answer_keeps_the_partial_answer(
    qtbot, make_window, tiny_model_dir, slow_steps
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(400))
    window.chat.chat_view.set_prompt_text("a long one")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_delta, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.send_button.click()
    assert window.chat.chat_view.stop_button.isEnabled()
    assert not window.chat.chat_view.send_button.isEnabled()
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        window.findChild(QPushButton, "stopButton").click()
    answer = window.chat.conversation.messages[-1]
    assert answer.role == "assistant"
    assert answer.figures.finish_reason == "stop"
    assert 1 <= answer.figures.generated_tokens < 400
    assert "stopped" in window.chat.chat_view.transcript.toPlainText()
    assert not window.chat.chat_view.stop_button.isEnabled()
    assert window.chat.chat_view.send_button.isEnabled()


def test_loop_and_device_are_locked_while_streaming(
    qtbot, make_window, tiny_model_dir, slow_steps
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(400))
    naive = window.findChild(QPushButton, "modeNaiveButton")
    window.chat.chat_view.set_prompt_text("lock test")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_delta, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.send_button.click()
    assert not naive.isEnabled() and "wait for this one" in naive.toolTip()
    assert not window.chat.side_panel.device_selector.isEnabled()
    naive.click()  # ignored: disabled
    assert window.chat.side_panel.mode() == "iobinding"
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        qtbot.keyClick(window.chat.chat_view.prompt_edit, "\x1b")  # Esc
    assert window.chat.conversation.messages[-1].figures.mode == "iobinding"
    assert naive.isEnabled() and window.chat.side_panel.device_selector.isEnabled()


def test_model_that_fails_to_load_shows_a_message(
    qtbot, make_window, tiny_model_dir, tmp_path
) -> None:
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not an onnx file")
    window = make_window(["--model", str(broken)])
    assert window.chat.controller.backend_session.state is State.NO_MODEL
    assert window.banner.isVisible() and window.banner.level == "error"
    assert "broken-model" in window.banner.text()
    assert not window.chat.chat_view.send_button.isEnabled()
    # The app keeps running: open a good model from the same window.
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=30_000
    ):
        window.open_model(tiny_model_dir)
    assert window.chat.controller.backend_session.state is State.READY
    assert not window.banner.isVisible()
    assert window.chat.chat_view.send_button.isEnabled()


def test_failed_reload_keeps_the_conversation(qtbot, make_window, tiny_model_dir, tmp_path) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(8))
    send_and_wait(qtbot, window, "remember me")
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.load_failed, timeout=30_000
    ):
        window.open_model(tmp_path / "missing")
    assert "missing" in window.banner.text() and "Still using" in window.banner.text()
    assert len(window.chat.conversation.messages) == 2
    assert "remember me" in window.chat.chat_view.transcript.toPlainText()
    send_and_wait(qtbot, window, "still here")
    assert len(window.chat.conversation.messages) == 4


def test_a_model_that_does_not_fit_is_refused_and_the_chat_keeps_its_model(
    qtbot, make_window, tiny_model_dir, varied_model_dir, monkeypatch
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    monkeypatch.setattr(
        model_description, "available_memory", lambda: 0
    )  # nothing free, nothing freed
    monkeypatch.setattr(model_jobs.EngineHost, "held_bytes", lambda _self: 0)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.load_failed, timeout=30_000
    ):
        window.open_model(varied_model_dir)
    text = window.banner.text()
    assert window.banner.level == "error" and "needs about" in text and "0 B are free" in text
    assert "Still using" in text and window.chat.controller.backend_session.state is State.READY
    assert window.chat.controller.backend_session.model.folder == tiny_model_dir


@pytest.mark.skipif(
    any(d.name == "cuda" for d in available_devices()), reason="CUDA is available here"
)
def test_unavailable_device_falls_back_with_the_reason_shown(make_window, tiny_model_dir) -> None:
    window = make_window(["--model", str(tiny_model_dir), "--device", "cuda"])
    assert window.chat.controller.backend_session.state is State.READY
    assert window.chat.controller.backend_session.model.device == "cpu"
    reason = window.chat.side_panel.fallback_label
    assert not reason.isHidden() and "cuda" in reason.text() and "CPU" in reason.text()
    assert window.banner.level == "warning"
    assert window.chat.side_panel.device() == "cpu"


def test_prompt_over_the_context_shows_a_message_and_keeps_history(
    qtbot, make_window, tiny_model_dir
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "short question")
    too_long = "word " * 700  # the tiny model's context holds 512 tokens
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.set_prompt_text(too_long)
        window.chat.chat_view.send_button.click()
    assert window.banner.isVisible() and window.banner.level == "error"
    assert "context" in window.banner.text()
    assert len(window.chat.conversation.messages) == 2  # the earlier turn stays
    assert "short question" in window.chat.chat_view.transcript.toPlainText()
    assert window.chat.chat_view.prompt_text() == too_long  # given back as typed, for editing
    assert window.chat.controller.backend_session.state is State.READY


def test_exception_in_the_worker_shows_a_message(
    qtbot, make_window, tiny_model_dir, monkeypatch
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "before the fault")

    def broken(*_args, **_kwargs):
        raise RuntimeError("simulated fault")

    with monkeypatch.context() as patch:
        patch.setattr(Engine, "chat", broken)
        with qtbot.waitSignal(
            window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
        ):
            window.chat.chat_view.set_prompt_text("trigger")
            window.chat.chat_view.send_button.click()
    assert "RuntimeError: simulated fault" in window.banner.text()
    assert len(window.chat.conversation.messages) == 2
    send_and_wait(qtbot, window, "after the fault")
    assert len(window.chat.conversation.messages) == 4
    assert not window.banner.isVisible()  # a new answer clears the old error


def test_exception_mid_answer_keeps_what_was_written(
    qtbot, make_window, tiny_model_dir, monkeypatch
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(50))
    original = loops.KVLoop.forward
    calls = {"n": 0}

    def failing_forward(self, new_ids, all_logits=False, rows=None):
        calls["n"] += 1
        if calls["n"] > 10:
            raise RuntimeError("device lost")
        return original(self, new_ids, all_logits, rows)

    monkeypatch.setattr(loops.KVLoop, "forward", failing_forward)
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.set_prompt_text("go")
        window.chat.chat_view.send_button.click()
    answer = window.chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.figures.finish_reason == "error"
    assert answer.figures.generated_tokens == 10
    assert "device lost" in window.banner.text()
    assert window.chat.chat_view.prompt_text() == ""


def test_settings_persist_across_two_windows(make_window, tiny_model_dir, settings_file) -> None:
    first = make_window(["--model", str(tiny_model_dir)])
    panel = first.chat.side_panel
    first.findChild(QPushButton, "modeNaiveButton").click()
    panel.sampling_box.temperature_spin.setValue(0.35)
    panel.sampling_box.top_p_spin.setValue(0.8)
    panel.sampling_box.top_k_spin.setValue(7)
    panel.sampling_box.repetition_spin.setValue(1.2)
    panel.sampling_box.max_tokens_spin.setValue(77)
    panel.sampling_box.seed_spin.setValue(1234)
    panel.system_prompt_box.edit.setPlainText("You are terse.")
    first.close()
    assert settings_file.is_file()

    second = make_window(["--model", str(tiny_model_dir)])
    options = second.chat.side_panel.options()
    assert options.mode == "naive"
    assert second.findChild(QPushButton, "modeNaiveButton").isChecked()
    s = options.settings
    assert (s.temperature, s.top_p, s.top_k, s.repetition_penalty) == (0.35, 0.8, 7, 1.2)
    assert (s.max_new_tokens, s.seed) == (77, 1234)
    assert options.system_prompt == "You are terse."
    assert str(tiny_model_dir) in second.settings.value("models/recent")
    # The command line wins over the saved choice, for that run only.
    third = make_window(["--model", str(tiny_model_dir), "--mode", "iobinding"])
    assert third.chat.side_panel.mode() == "iobinding"
    third.close()
    fourth = make_window(["--model", str(tiny_model_dir)])
    assert fourth.chat.side_panel.mode() == "naive"


def test_open_gguf_converts_with_progress_then_opens(
    qtbot, make_window, tiny_gguf, tmp_path
) -> None:
    window = make_window(["--model", str(tmp_path / "none")])
    out = tmp_path / "converted"
    plans: list[str] = []
    labels: list[str] = []
    window.chat.controller.backend_session.events.convert_planned.connect(plans.append)
    assert models_feature(window).convert_and_open(tiny_gguf, out)
    dialog = window.findChild(QProgressDialog, "convertProgressDialog")
    assert dialog is not None and dialog.isVisible()
    # connected after the window's own slot: sees the label that slot just set
    window.chat.controller.backend_session.events.convert_progress.connect(
        lambda *_: labels.append(dialog.toolTip())
    )
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=ANSWER_TIMEOUT_MS
    ):
        pass
    assert len(plans) == 1 and plans[0].startswith("tiny-llama.gguf: the model folder takes")
    # From the plan on, above every step (wrapped to the dialog's width; whole in its tooltip).
    assert labels[-1].startswith(plans[0] + "\n")
    assert window.chat.controller.backend_session.model.folder == out
    assert window.findChild(QProgressDialog, "convertProgressDialog") is None or not (
        dialog.isVisible()
    )
    assert not window.banner.isVisible()  # the load error of the missing folder is gone


def test_device_that_fails_to_start_shows_the_fallback_reason(
    make_window, tiny_model_dir, failing_gpu
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    assert "no driver" in window.chat.side_panel.fallback_label.text()
    assert window.banner.level == "warning" and "no driver" in window.banner.text()


def test_changing_threads_reloads_the_model_and_keeps_the_chat(
    qtbot, make_window, tiny_model_dir
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "keep me")
    spin = window.chat.side_panel.threads_spin
    spin.setValue(1)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=30_000
    ) as blocker:
        emit(spin.editingFinished)
    assert blocker.args[0].threads == 1
    assert len(window.chat.conversation.messages) == 2
    send_and_wait(qtbot, window, "and continue")
    assert len(window.chat.conversation.messages) == 4


def _choose_precision(qtbot, window: MainWindow, precision: str) -> ModelSummary:
    selector = window.chat.side_panel.precision_selector
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=30_000
    ) as blocker:
        selector.setCurrentIndex(selector.findData(precision))
    summary = blocker.args[0]
    assert isinstance(summary, ModelSummary)
    return summary


def test_the_precision_reloads_the_model_keeps_the_chat_and_is_remembered_per_model(
    qtbot, make_window, tiny_model_dir, tmp_path
) -> None:
    other = Path(shutil.copytree(tiny_model_dir, tmp_path / "other-model"))
    window = make_window(["--model", str(tiny_model_dir)])
    panel = window.chat.side_panel
    if not window.host.engine.model.native:  # no GGUF kernels here: no choice, nothing named
        assert not panel.precision_selector.isEnabled()
        assert "no precision to choose" in panel.precision_selector.toolTip()
        return
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "keep me")
    assert panel.precision() == "fast" and window.host.engine.precision == "fast"
    assert window.chat.conversation.messages[-1].figures.precision == "fast"
    summary = _choose_precision(qtbot, window, "exact")
    assert summary.precision == window.host.engine.precision == "exact"
    assert summary.kernels.endswith(", exact")  # the model line says what runs
    assert len(window.chat.conversation.messages) == 2
    send_and_wait(qtbot, window, "and continue")
    messages = window.chat.conversation.messages
    assert len(messages) == 4
    # Each answer's footer names the precision it was written at, the old one its own.
    assert [m.figures.precision for m in messages if m.role == "assistant"] == ["fast", "exact"]
    assert " · fast 8-bit · " in figures_line(messages[1].figures)
    assert " · exact · " in figures_line(messages[3].figures)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=30_000
    ):
        window.open_model(other)  # another model: its own choice (the default)
    assert panel.precision() == window.host.engine.precision == "fast"
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=30_000
    ):
        window.open_model(tiny_model_dir)
    assert panel.precision() == window.host.engine.precision == "exact"
    again = make_window(["--model", str(tiny_model_dir)])
    assert again.chat.side_panel.precision() == again.host.engine.precision == "exact"


def test_the_precision_is_locked_while_answering(
    qtbot, make_window, tiny_model_dir, slow_steps
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    selector = window.chat.side_panel.precision_selector
    usable = window.host.engine.model.native
    assert selector.isEnabled() is usable
    set_sampling(window, greedy(400))
    window.chat.chat_view.set_prompt_text("lock test")
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_delta, timeout=ANSWER_TIMEOUT_MS
    ):
        window.chat.chat_view.send_button.click()
    assert not selector.isEnabled()
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=ANSWER_TIMEOUT_MS
    ):
        qtbot.keyClick(window.chat.chat_view.prompt_edit, "\x1b")  # Esc
    assert selector.isEnabled() is usable  # a model without GGUF kernels keeps it greyed


class _Cycle:
    def __init__(self) -> None:
        self.me = self  # only the garbage collector can free this


def test_a_replaced_model_is_freed(qtbot, make_window, tiny_model_dir) -> None:
    """The app exempts what it holds at load time from garbage collection (no long collection
    mid-answer); what is dropped later, such as a replaced model, must still be freed."""
    held = _Cycle()
    held_ref = weakref.ref(held)
    window = make_window(["--model", str(tiny_model_dir)])
    assert gc.get_freeze_count() > 0
    engine_ref = weakref.ref(window.host.engine)
    del held  # exempted by the load above, garbage from now on
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=30_000
    ):
        window.open_model(tiny_model_dir)
    assert window.host.engine is not None
    assert engine_ref() is None
    assert held_ref() is None


def models_feature(window: MainWindow) -> ModelsFeature:
    feature = window.feature(ModelsFeature)
    assert feature is not None
    return feature
