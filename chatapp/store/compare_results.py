"""The last comparison's results, kept in the data folder so that the comparison view shows
them again after a restart (issue 36). No Qt.

One JSON file: the last comparison (the shape of `chatapp bench --json`) and the last sweep's
points. It is written whole to a fresh temporary file and renamed (safe_delete.write_replacing),
so a crash leaves the old one and a link planted at a temporary name is never followed. It is
input like any other: read whole (at most MAX_BYTES, MAX_DEPTH levels), every field the view
reads checked for its type and range before anything draws it; a damaged file is moved aside
(`comparison.json.corrupt-<time>`, kept) with one line naming it, and the view starts empty.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from chatapp.datadir import data_dir
from chatapp.error_text import first_line
from chatapp.json_text import nesting_depth
from chatapp.safe_delete import write_replacing
from chatapp.store.recovery import corrupt_name

RESULTS_FILE = "comparison.json"
FORMAT = 1
MAX_BYTES = 64 * 1024 * 1024  # a 2048-token comparison of three loops is under 3 MB
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SavedResults:
    comparison: dict[str, Any] | None
    sweep: list[dict[str, Any]] = field(default_factory=list)
    sweep_header: dict[str, Any] | None = None  # the sweep's model, device (a sweep alone)


def default_results_path() -> Path:
    return data_dir() / RESULTS_FILE


def save_results(results: SavedResults, path: Path | None = None) -> None:
    """Replace the saved results (OSError if the data folder cannot be written)."""
    target = path or default_results_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "format": FORMAT,
        "comparison": results.comparison,
        "sweep": results.sweep,
        "sweep_header": results.sweep_header,
    }
    write_replacing(target, json.dumps(_finite(data), ensure_ascii=False))


@dataclass(frozen=True)
class ReadResults:
    """What the view shows at start: the results (None: nothing saved) and, where the file
    was damaged and moved aside, the one line that says so (else "")."""

    results: SavedResults | None
    notice: str = ""


class Damaged(ValueError):
    """Why a saved comparison cannot be shown, in words (e.g. "sweep[2].naive has no first_run")."""


def load_results(path: Path | None = None) -> SavedResults | None:
    """The saved results, or None where there are none this version can show."""
    return read_saved(path).results


def read_saved(path: Path | None = None) -> ReadResults:
    """The saved results, validated whole (nesting, fields, types, ranges) before anything
    reads them. A damaged file is moved aside (kept for the person, never deleted) and named
    in the notice; what of it is sound (a comparison beside a damaged sweep) is still shown.
    Never raises."""
    source = path or default_results_path()
    try:
        if not source.is_file():
            return ReadResults(None)
        if source.stat().st_size > MAX_BYTES:
            raise Damaged(f"it is larger than {MAX_BYTES >> 20} MB")
        text = source.read_bytes().decode("utf-8")
        check_depth(text, MAX_DEPTH)
        data = json.loads(text)
        if not isinstance(data, dict):
            raise Damaged("it is not a JSON object")
        if data.get("format") != FORMAT:  # a newer version's file: not ours to judge
            log.info("the saved comparison %s has another format; not shown", source)
            return ReadResults(None)
        return _checked(data, source)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, Damaged) else first_line(exc, empty="unreadable")
        return ReadResults(None, _moved_aside(source, reason))


def _checked(data: dict[str, Any], source: Path) -> ReadResults:
    problems: list[str] = []
    comparison, sweep, header = (
        data.get("comparison"),
        data.get("sweep", []),
        data.get("sweep_header"),
    )
    if comparison is not None:
        comparison = _sound(problems, _check_result, comparison, "comparison")
    if not isinstance(sweep, list):
        problems.append("sweep is not a list")
        sweep = []
    if len(sweep) > MAX_ITEMS:
        problems.append(f"sweep has more than {MAX_ITEMS} points")
        sweep = []
    points = [_sound(problems, _check_point, p, f"sweep[{i}]") for i, p in enumerate(sweep)]
    sweep = [p for p in points if p is not None] if all(p is not None for p in points) else []
    if header is not None:
        header = _sound(problems, _check_header, header, "sweep_header")
    notice = _moved_aside(source, problems[0]) if problems else ""
    if comparison is None and not sweep:
        return ReadResults(None, notice)
    return ReadResults(SavedResults(comparison, sweep, header), notice)


def _sound(problems: list[str], check: Any, value: Any, where: str) -> Any:
    try:
        check(value, where)
    except Damaged as exc:
        problems.append(str(exc))
        return None
    return value


def _moved_aside(source: Path, reason: str) -> str:
    """Move the damaged `source` aside; the line that tells the person where it went."""
    target = corrupt_name(source, datetime.now())
    try:
        os.replace(source, target)
    except OSError as exc:
        log.warning("the saved comparison %s is damaged (%s) and stays: %s", source, reason, exc)
        return f"The saved comparison {source} could not be read ({reason}); it was not shown."
    log.warning("the saved comparison %s is damaged (%s); moved to %s", source, reason, target)
    return (
        f"The saved comparison {source} could not be read ({reason}); it was moved to "
        f"{target.name} and the view starts empty."
    )


def check_depth(text: str, limit: int) -> None:
    """Damaged where JSON `text` nests arrays and objects deeper than `limit` (json.loads would
    recurse once a level: a file of 100k brackets ends in RecursionError, or worse)."""
    if nesting_depth(text) > limit:
        raise Damaged(f"it is nested more than {limit} levels deep")


# ---- the shape the view reads (chatapp bench --json's, engine/bench/stats.py) --------------
LOOPS = ("nocache", "naive", "iobinding")
PEERS = ("genai", "llamacpp")
MAX_DEPTH = 16  # a saved result nests 7 levels (a sweep's point, a loop, its run, a step)
MAX_ITEMS = 100_000  # tokens, steps or points in one list (the view allows 2048 tokens)
MAX_COUNT = 1 << 40  # tokens, bytes: beyond this a count is no measurement
LOOP_FIGURES = ("tokens_per_s", "ttft_s")  # what the table and charts read of every loop
OPTIONAL_FIGURES = (
    "prompt_tokens_per_s",
    "answer_s",
    "latency_p50_s",
    "latency_p95_s",
    "host_prep_share",
    "run_s_per_token",
    "host_s_per_token",
    "sample_s_per_token",
    "perplexity",
    "prompt_perplexity",
)
STEP_FIGURES = ("run_s", "host_s", "sample_s")
TRANSFER_FIGURES = ("h2d_bytes_per_token", "d2h_bytes_per_token")


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Damaged(f"{where} is not an object")
    return value


def _items(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise Damaged(f"{where} is not a list")
    if len(value) > MAX_ITEMS:
        raise Damaged(f"{where} has more than {MAX_ITEMS:,} items")
    return value


def _number(value: Any, where: str, optional: bool = False, most: float = MAX_COUNT) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Damaged(f"{where} is not a number")
    if not math.isfinite(value) or not 0 <= value <= most:
        raise Damaged(f"{where} is out of range")


def _count(value: Any, where: str, least: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_COUNT:
        raise Damaged(f"{where} is not a whole number of at least {least}")


def _text(value: Any, where: str) -> None:
    if value is not None and not isinstance(value, str):
        raise Damaged(f"{where} is not text")


def _check_run(run: Any, where: str) -> None:
    run = _object(run, where)
    for i, latency in enumerate(_items(run.get("latencies_s"), f"{where}.latencies_s")):
        _number(latency, f"{where}.latencies_s[{i}]")
    for i, step in enumerate(_items(run.get("steps", []), f"{where}.steps")):
        step = _object(step, f"{where}.steps[{i}]")
        for key in STEP_FIGURES:
            _number(step.get(key), f"{where}.steps[{i}].{key}")
        for key in ("h2d_bytes", "d2h_bytes"):
            _number(step.get(key, 0), f"{where}.steps[{i}].{key}")
    for i, token in enumerate(_items(run.get("token_ids", []), f"{where}.token_ids")):
        _count(token, f"{where}.token_ids[{i}]")


def _check_figures(summary: dict[str, Any], where: str) -> None:
    for key in OPTIONAL_FIGURES:  # a perplexity may be 1e27: any finite figure
        _number(summary.get(key), f"{where}.{key}", optional=True, most=math.inf)
    if "repeats" in summary:
        _count(summary["repeats"], f"{where}.repeats", least=1)
    spread = _object(summary.get("spread", {}), f"{where}.spread")
    for key, pair in spread.items():
        pair = _items(pair, f"{where}.spread.{key}")
        if len(pair) != 2:
            raise Damaged(f"{where}.spread.{key} is not a low and a high")
        for value in pair:
            _number(value, f"{where}.spread.{key}")
    for key in ("tokens_per_s_all", "answer_s_all", "latency_p50_s_all"):
        for i, value in enumerate(_items(summary.get(key, []), f"{where}.{key}")):
            _number(value, f"{where}.{key}[{i}]")


def _check_loop(summary: Any, where: str) -> None:
    summary = _object(summary, where)
    for key in LOOP_FIGURES:
        _number(summary.get(key), f"{where}.{key}")
    _check_figures(summary, where)
    if "first_run" not in summary:
        raise Damaged(f"{where} has no first_run")
    _check_run(summary["first_run"], f"{where}.first_run")
    transfer = _object(summary.get("transfer"), f"{where}.transfer")
    for key in TRANSFER_FIGURES:
        _number(transfer.get(key), f"{where}.transfer.{key}")


def _check_peer(summary: Any, where: str) -> None:
    summary = _object(summary, where)
    for key in LOOP_FIGURES:
        _number(summary.get(key), f"{where}.{key}", optional=True)
    _check_figures(summary, where)
    for i, token in enumerate(_items(summary.get("token_ids", []), f"{where}.token_ids")):
        _count(token, f"{where}.token_ids[{i}]")


def _check_point(point: Any, where: str) -> None:
    point = _object(point, where)
    _count(point.get("prompt_tokens"), f"{where}.prompt_tokens")
    loops = [loop for loop in LOOPS if loop in point]
    if not loops:
        raise Damaged(f"{where} has no loop's figures")
    for loop in loops:
        _check_loop(point[loop], f"{where}.{loop}")
    for peer in PEERS:
        if peer in point:
            _check_peer(point[peer], f"{where}.{peer}")
    if not isinstance(point.get("same_tokens", True), bool):
        raise Damaged(f"{where}.same_tokens is not true or false")


def _check_header(header: Any, where: str) -> None:
    header = _object(header, where)
    for key in ("model", "device"):
        _text(header.get(key), f"{where}.{key}")
    environment = _object(header.get("environment", {}), f"{where}.environment")
    _text(environment.get("time"), f"{where}.environment.time")


def _check_result(result: Any, where: str) -> None:
    _check_point(result, where)
    _count(result.get("max_new_tokens"), f"{where}.max_new_tokens", least=1)
    if "device" not in result:
        raise Damaged(f"{where} names no device")
    _check_header(result, where)


def _finite(value: Any) -> Any:
    """JSON has no NaN: a figure that has none (a perplexity of nothing) is saved as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
