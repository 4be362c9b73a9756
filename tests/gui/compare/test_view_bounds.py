"""The comparison view's inputs are bounded (issue 12): the sweep's context list, the prompt
line and a system prompt longer than the context end with a message, not hours of work or
gigabytes of filler text."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.gui.compare.view import MAX_PROMPT_CHARS, parse_contexts
from chatapp.session.arg_checks import MAX_SWEEP_POINTS
from tests.gui.compare.test_view import RUN_TIMEOUT_MS, open_compare
from tests.gui.conftest import WindowFactory


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("9" * 5000, "is not a context length"),
        (",".join(str(16 + i) for i in range(MAX_SWEEP_POINTS + 1)), "at most 32 context"),
        ("１２８", "'１２８' is not a context length"),  # full-width digits
        ("-5", "'-5' is not a context length"),
        ("1e9", "'1e9' is not a context length"),
        ("2000000", "is more than any model's context"),
        (" , ,", "give at least one context length"),
    ],
)
def test_bad_sweep_lists_are_refused_in_words(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        parse_contexts(text)
    assert says in str(refused.value) and len(str(refused.value)) < 120


def test_good_sweep_lists_pass() -> None:
    assert parse_contexts("512, 128,128 ,1024") == (128, 512, 1024)


def test_a_sweep_beyond_the_models_context_is_skipped_not_built(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    _window, view = open_compare(make_window, tiny_model_dir)
    view.prompt_edit.setText("x" * (MAX_PROMPT_CHARS * 3))
    assert len(view.prompt_edit.text()) == MAX_PROMPT_CHARS
    view.prompt_edit.setText("Hi")
    view.repeats_spin.setValue(1)
    view.tokens_spin.setValue(4)
    view.sweep_edit.setText("32, 1000000")  # a million tokens of filler would be ~4 MB x copies
    lines: list[str] = []
    assert view.run_sweep()
    view.job.sig_yielded.connect(
        lambda batch: lines.extend(getattr(i, "text", "") for i in batch.items)
    )
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT_MS)
    assert [p["context_tokens"] for p in view.sweep_points] == [32]
    assert any("Context 1000000: longer than the model's context" in t for t in lines)


def test_a_system_prompt_longer_than_the_context_is_refused_in_words(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    window, view = open_compare(make_window, tiny_model_dir)
    window.chat.side_panel.system_prompt_box.edit.setPlainText("word " * 2_000_000)  # 10 MB
    view.repeats_spin.setValue(1)
    view.tokens_spin.setValue(4)
    assert view.run_comparison()
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT_MS)
    assert "context holds" in view.status.text() and "\n" not in view.status.text()
    assert view.result is None
