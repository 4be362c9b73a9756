"""The last comparison kept in the data folder: written whole, read back, and a damaged or
foreign file read as nothing saved (the view then starts empty)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chatapp.store.compare_results import SavedResults, load_results, save_results


def loop(latencies: list[float]) -> dict[str, Any]:
    return {"first_run": {"latencies_s": latencies, "perplexity": None}, "tokens_per_s": 10.0}


def comparison() -> dict[str, Any]:
    return {
        "model": "tiny",
        "device": "cpu",
        "prompt_tokens": 20,
        "max_new_tokens": 4,
        "naive": loop([0.01, 0.02, 0.03]),
        "iobinding": {**loop([0.01, 0.01, 0.01]), "perplexity": float("nan")},
    }


def test_results_come_back_as_they_were_saved(tmp_path: Path) -> None:
    path = tmp_path / "data" / "comparison.json"
    sweep = [{**comparison(), "prompt_tokens": 128, "context_tokens": 128}]
    save_results(SavedResults(comparison(), sweep, {"model": "tiny"}), path)
    saved = load_results(path)
    assert saved is not None and saved.comparison is not None
    assert saved.comparison["naive"]["first_run"]["latencies_s"] == [0.01, 0.02, 0.03]
    assert saved.comparison["iobinding"]["perplexity"] is None  # NaN has no JSON: null
    assert [p["context_tokens"] for p in saved.sweep] == [128]
    assert saved.sweep_header == {"model": "tiny"}
    assert not list(path.parent.glob("*.tmp"))  # written whole, then renamed


def test_a_sweep_alone_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    save_results(SavedResults(None, [{**comparison(), "prompt_tokens": 64}]), path)
    saved = load_results(path)
    assert saved is not None and saved.comparison is None and len(saved.sweep) == 1


def test_nothing_saved_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    assert load_results(path) is None
    save_results(SavedResults(None, []), path)
    assert load_results(path) is None


def test_a_damaged_or_foreign_file_reads_as_nothing_saved(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    for text in (
        "{not json",
        "[1, 2]",
        json.dumps({"format": 99, "comparison": comparison()}),
        json.dumps({"format": 1, "comparison": {"naive": "fast"}, "sweep": []}),
        json.dumps({"format": 1, "comparison": None, "sweep": [{"prompt_tokens": "x"}]}),
    ):
        path.write_text(text, encoding="utf-8")
        assert load_results(path) is None, text
    path.write_bytes(b"\xff\xfe\x00")
    assert load_results(path) is None
    # A bad sweep does not cost the good comparison beside it.
    path.write_text(
        json.dumps({"format": 1, "comparison": comparison(), "sweep": [{"x": 1}]}), "utf-8"
    )
    saved = load_results(path)
    assert saved is not None and saved.comparison is not None and saved.sweep == []
