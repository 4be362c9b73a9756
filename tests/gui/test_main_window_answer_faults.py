"""The window and a fault at each stage of an answer: the failure is shown as one line, the
chat keeps what was written, and the window takes the next question (the figures' overflow
is no failure at all: the perplexity reads n/a)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.gui.chat.controller import State
from chatapp.session.formatting import MISSING
from tests.answer_faults import FAILING_STAGES, inject, message_of
from tests.gui.conftest import ANSWER_TIMEOUT_MS, greedy, send_and_wait, set_sampling


@pytest.mark.parametrize("stage", FAILING_STAGES)
def test_a_fault_at_any_stage_is_shown_and_the_window_goes_on(
    qtbot, make_window, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, stage: str
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(8))
    controller = window.chat.controller
    with monkeypatch.context() as patch:
        inject(patch, stage)
        with qtbot.waitSignal(controller.chat.events.answer_failed, timeout=ANSWER_TIMEOUT_MS):
            window.chat.chat_view.set_prompt_text("trigger")
            window.chat.chat_view.send_button.click()
        qtbot.waitUntil(
            lambda: controller.backend_session.state is State.READY, timeout=ANSWER_TIMEOUT_MS
        )
    banner = window.banner.text()
    assert message_of(stage) in banner and "\n" not in banner
    messages = window.chat.conversation.messages
    if stage == "prompt":  # nothing was answered: the question is back in the prompt box
        assert window.chat.chat_view.prompt_text() == "trigger"
        window.chat.chat_view.set_prompt_text("")
    else:  # what was written stays, marked as failed
        assert messages[-1].role == "assistant"
        assert messages[-1].figures.finish_reason == "error"
    before = len(messages)
    send_and_wait(qtbot, window, "after the fault")
    assert len(window.chat.conversation.messages) == before + 2
    assert window.chat.conversation.messages[-1].figures.finish_reason != "error"
    assert not window.banner.isVisible()


def test_an_overflowing_perplexity_reads_n_a(
    qtbot, make_window, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(8))
    with monkeypatch.context() as patch:
        inject(patch, "figures overflow")
        send_and_wait(qtbot, window, "huge weights")
    answer = window.chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.figures.generated_tokens
    assert answer.figures.perplexity is None and answer.figures.finish_reason != "error"
    assert window.chat.side_panel.figures_box.perplexity_value.text() == MISSING
    send_and_wait(qtbot, window, "again")
    assert window.chat.conversation.messages[-1].figures.perplexity is not None
