"""The chat feature and the banner (issue 37): an answer that succeeds clears a message shown
before it started (an old failure's warning or error); one shown while it ran, or a failed
answer's error, stays."""

from __future__ import annotations

import pytest

from chatapp.engine import loops
from chatapp.gui.main_window import MainWindow
from tests.gui.conftest import greedy, send_and_wait, set_sampling


@pytest.fixture
def window(make_window, tiny_model_dir) -> MainWindow:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(3))
    return window


def test_a_device_failure_warning_goes_once_an_answer_succeeds(
    qtbot, make_window, tiny_model_dir, failing_gpu
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(3))
    assert window.banner.level == "warning" and "no driver" in window.banner.text()
    send_and_wait(qtbot, window, "hello")
    assert window.chat.conversation.messages[-1].figures.finish_reason != "error"
    assert not window.banner.isVisible() and window.banner.level == ""
    assert "no driver" in window.chat.side_panel.fallback_label.text()  # still said, quietly


@pytest.mark.parametrize("level", ["warning", "info"])
def test_a_notice_stays_through_good_answers(qtbot, window, level: str) -> None:
    window.show_message("The chat history was damaged and moved aside.", level)
    send_and_wait(qtbot, window, "hello")
    if level == "warning":  # an error or a tip goes when the answer starts, a warning stays
        assert window.banner.isVisible() and "moved aside" in window.banner.text()
    else:
        assert not window.banner.isVisible()


def test_a_message_shown_while_the_answer_runs_stays(qtbot, window) -> None:
    window.show_message("GPU (test) failed; running on the CPU.", "warning", until_answer=True)
    window.chat.controller.chat.events.answer_started.connect(
        lambda _options: window.show_message("The chat history is busy.", "error")
    )
    send_and_wait(qtbot, window, "hello")
    assert window.banner.isVisible() and window.banner.text() == "The chat history is busy."


def test_a_failed_answer_keeps_its_error_until_a_good_one(qtbot, window, monkeypatch) -> None:
    original = loops.KVLoop.forward

    def failing(self, new_ids, all_logits=False, rows=None):
        raise RuntimeError("simulated fault")

    monkeypatch.setattr(loops.KVLoop, "forward", failing)
    send_and_wait(qtbot, window, "first")
    assert window.banner.level == "error" and "simulated fault" in window.banner.text()
    monkeypatch.setattr(loops.KVLoop, "forward", original)
    send_and_wait(qtbot, window, "second")
    assert not window.banner.isVisible()
