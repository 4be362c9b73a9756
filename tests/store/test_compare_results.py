"""The last comparison kept in the data folder: written whole, read back, and a damaged or
foreign file read as nothing saved (the view then starts empty)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatapp import safe_delete
from chatapp.store.compare_results import (
    ReadResults,
    SavedResults,
    load_results,
    read_saved,
    save_results,
)


def loop(latencies: list[float]) -> dict[str, Any]:
    return {
        "first_run": {"latencies_s": latencies, "perplexity": None},
        "tokens_per_s": 10.0,
        "ttft_s": 0.05,
        "transfer": {"h2d_bytes_per_token": 0.0, "d2h_bytes_per_token": 0.0},
    }


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


def test_a_foreign_format_reads_as_nothing_saved_and_stays(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps({"format": 99, "comparison": comparison()}), "utf-8")
    assert read_saved(path) == ReadResults(None)  # a newer version's: not ours to move
    assert path.is_file()


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def without(key: str) -> dict[str, Any]:
    result = comparison()
    del result["naive"][key]
    return result


def with_run(**run: Any) -> dict[str, Any]:
    result = comparison()
    result["naive"]["first_run"].update(run)
    return result


DAMAGED = {
    "not json": "{not json",
    "a list": "[1, 2]",
    "deeply nested": json.dumps({"format": 1, "comparison": None, "sweep": [0]}).replace(
        "[0]", nested(100_000)
    ),
    "nested in a string is fine, in the data not": '{"format": 1, "x": "[[[[", "sweep": '
    + nested(40)
    + "}",
    "a loop that is text": json.dumps({"format": 1, "comparison": {"naive": "fast"}}),
    "a bad prompt size": json.dumps({"format": 1, "sweep": [{"prompt_tokens": "x"}]}),
    "no first run": json.dumps({"format": 1, "comparison": without("first_run")}),
    "no speed": json.dumps({"format": 1, "comparison": without("tokens_per_s")}),
    "no transfer": json.dumps({"format": 1, "comparison": without("transfer")}),
    "NaN latency": json.dumps({"format": 1, "comparison": with_run(latencies_s=[float("nan")])}),
    "latency past a float": json.dumps({"format": 1, "comparison": with_run()}).replace(
        "0.01", "1e400", 1
    ),
    "negative latency": json.dumps({"format": 1, "comparison": with_run(latencies_s=[-1.0])}),
    "a step without its run time": json.dumps(
        {"format": 1, "comparison": with_run(steps=[{"host_s": 0.0, "sample_s": 0.0}])}
    ),
    "true as a token count": json.dumps(
        {"format": 1, "comparison": {**comparison(), "max_new_tokens": True}}
    ),
    "a token count of 2^70": json.dumps(
        {"format": 1, "comparison": {**comparison(), "prompt_tokens": 2**70}}
    ),
    "an environment that is a list": json.dumps(
        {"format": 1, "comparison": {**comparison(), "environment": []}}
    ),
}


@pytest.mark.parametrize("text", DAMAGED.values(), ids=DAMAGED.keys())
def test_a_damaged_file_is_moved_aside_with_one_line_naming_it(tmp_path: Path, text: str) -> None:
    path = tmp_path / "comparison.json"
    path.write_text(text, encoding="utf-8")
    read = read_saved(path)
    assert read.results is None
    assert str(path) in read.notice and "\n" not in read.notice
    (moved,) = tmp_path.glob("comparison.json.corrupt-*")
    assert moved.name in read.notice and moved.read_text(encoding="utf-8") == text  # kept
    assert not path.exists()
    assert read_saved(path) == ReadResults(None)  # the next start: nothing saved, no line


def test_bytes_that_are_not_text_are_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    path.write_bytes(b"\xff\xfe\x00")
    read = read_saved(path)
    assert read.results is None and "moved to" in read.notice


def test_a_bad_sweep_does_not_cost_the_good_comparison_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "comparison.json"
    sound = {**comparison(), "iobinding": loop([0.01])}  # JSON has no NaN: saved as null
    path.write_text(json.dumps({"format": 1, "comparison": sound, "sweep": [{"x": 1}]}), "utf-8")
    read = read_saved(path)
    assert read.results is not None and read.results.comparison is not None
    assert read.results.sweep == [] and "sweep[0]" in read.notice


def test_saving_never_writes_through_a_link_at_a_temporary_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    users = tmp_path / "users_file.txt"
    users.write_text("the user's own words", encoding="utf-8")
    path = tmp_path / "comparison.json"
    (tmp_path / "comparison.json.tmp").symlink_to(users)  # the old fixed name
    save_results(SavedResults(comparison()), path)
    assert users.read_text(encoding="utf-8") == "the user's own words"
    assert load_results(path) is not None
    # A link planted at the very name the next write will use: refused, nothing written.
    monkeypatch.setattr(safe_delete.secrets, "token_hex", lambda _n: "0123456789ab")
    (tmp_path / ".comparison.json.0123456789ab.writing").symlink_to(users)
    with pytest.raises(FileExistsError):
        save_results(SavedResults(None, [comparison()]), path)
    assert users.read_text(encoding="utf-8") == "the user's own words"
    saved = load_results(path)
    assert saved is not None and saved.comparison is not None  # the last good one stays
