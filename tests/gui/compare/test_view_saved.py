"""The last comparison and sweep come back after a restart, as they were drawn (issue 36)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gui.compare.test_view import RUN_TIMEOUT_MS, open_compare
from tests.gui.conftest import WindowFactory


def table_text(view) -> list[list[str]]:
    table = view.table
    return [
        [table.item(r, c).text() if table.item(r, c) else "" for c in range(table.columnCount())]
        for r in range(table.rowCount())
    ]


def test_results_survive_a_restart(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path, compare_results_file: Path
) -> None:
    window, view = open_compare(make_window, tiny_model_dir)
    view.tokens_spin.setValue(10)
    view.repeats_spin.setValue(2)
    assert view.run_comparison()
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT_MS)
    view.sweep_edit.setText("32, 64")
    assert view.run_sweep()
    qtbot.waitUntil(lambda: not view.running, timeout=RUN_TIMEOUT_MS)
    assert compare_results_file.is_file()
    before = (view.explanation.text(), table_text(view), view.caching_chart.title())
    lines = {loop: view.latency_chart.lines[loop].count() for loop in view.latency_chart.lines}
    window.close()

    _again, restored = open_compare(make_window, tiny_model_dir)
    assert (restored.explanation.text(), table_text(restored), restored.caching_chart.title()) == (
        before
    )
    assert {k: restored.latency_chart.lines[k].count() for k in lines} == lines
    assert restored.sweep_chart.lines["naive"].count() == 2
    assert restored.speed_chart.value("naive") == view.speed_chart.value("naive")
    assert restored.status.text().startswith("The last results, measured ")
    assert restored.export_button.isEnabled()
    assert "estimated" not in restored.sweep_estimate.text().lower()  # from the last comparison
    assert restored.sweep_estimate.text().startswith("About ")


def test_a_damaged_results_file_starts_empty(
    make_window: WindowFactory, tiny_model_dir: Path, compare_results_file: Path
) -> None:
    compare_results_file.parent.mkdir(parents=True, exist_ok=True)
    compare_results_file.write_text("{broken", encoding="utf-8")
    _window, view = open_compare(make_window, tiny_model_dir)
    assert view.result is None and view.explanation.text() == ""
    assert not view.export_button.isEnabled()
    assert view.sweep_estimate.text() == "Estimated when it starts"


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000 + "]" * 200_000,  # deeper than any parser's recursion
        '{"format": 1, "comparison": {"prompt_tokens": 20, "max_new_tokens": 4, "device": "cpu",'
        ' "naive": {"tokens_per_s": 1.0}}}',  # the right shape, its fields missing
    ],
    ids=["nested", "fields missing"],
)
def test_a_hostile_results_file_is_moved_aside_and_named(
    make_window: WindowFactory, tiny_model_dir: Path, compare_results_file: Path, text: str
) -> None:
    compare_results_file.parent.mkdir(parents=True, exist_ok=True)
    compare_results_file.write_text(text, encoding="utf-8")
    _window, view = open_compare(make_window, tiny_model_dir)
    assert view.result is None and not view.export_button.isEnabled()
    status = view.status.text()
    assert str(compare_results_file) in status and "moved to" in status
    assert not compare_results_file.exists()
    assert list(compare_results_file.parent.glob("comparison.json.corrupt-*"))


def test_results_that_fail_to_draw_leave_an_empty_view_and_one_line(
    make_window: WindowFactory,
    tiny_model_dir: Path,
    compare_results_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chatapp.gui.compare.view import CompareView
    from chatapp.store.compare_results import SavedResults, save_results
    from tests.store.test_compare_results import comparison

    save_results(SavedResults(comparison()), compare_results_file)

    def broken(_self: CompareView, _saved: SavedResults) -> None:
        raise KeyError("a field nobody checked")

    monkeypatch.setattr(CompareView, "show_saved", broken)
    _window, view = open_compare(make_window, tiny_model_dir)
    assert view.result is None and not view.export_button.isEnabled()
    assert "could not be shown" in view.status.text() and "\n" not in view.status.text()
    assert str(compare_results_file) in view.status.text()
