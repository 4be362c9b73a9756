"""Issue 16's first finding: a new user (fresh settings) asks the README's question at the
default settings and reads "Paris"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gui.conftest import open_loaded_window, send_and_wait

pytestmark = pytest.mark.default_model


def test_the_readme_question_is_answered_right_at_the_defaults(
    qtbot, default_model_dir: Path
) -> None:
    window = open_loaded_window(default_model_dir)
    try:
        box = window.chat.side_panel.sampling_box
        assert box.preset() == "model" and box.settings().greedy
        assert "Precise preset" in box.source_label.text()
        send_and_wait(qtbot, window, "What is the capital of France?")
        answer = window.chat.conversation.messages[-1].content
        assert "Paris" in answer, answer
    finally:
        window.close()
        window.deleteLater()
