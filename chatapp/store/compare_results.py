"""The last comparison's results, kept in the data folder so that the comparison view shows
them again after a restart (issue 36). No Qt.

One JSON file: the last comparison (the shape of `chatapp bench --json`) and the last sweep's
points. It is written whole to a temporary file and renamed, so a crash leaves the old one; a
file that is missing, too large, not JSON or not this shape reads as "nothing saved", never an
error the user must act on (the view then starts empty, as on a first run).
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chatapp.datadir import data_dir

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
    text = json.dumps(_finite(data), ensure_ascii=False)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, target)


def load_results(path: Path | None = None) -> SavedResults | None:
    """The saved results, or None where there are none this version can show."""
    source = path or default_results_path()
    try:
        if not source.is_file() or source.stat().st_size > MAX_BYTES:
            return None
        data = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        log.warning("the saved comparison %s cannot be read", source, exc_info=True)
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    comparison, sweep, header = data.get("comparison"), data.get("sweep"), data.get("sweep_header")
    if comparison is not None and not _looks_like_result(comparison):
        comparison = None
    if not isinstance(sweep, list) or not all(_looks_like_point(p) for p in sweep):
        sweep = []
    if not isinstance(header, dict):
        header = None
    if comparison is None and not sweep:
        return None
    return SavedResults(comparison, sweep, header)


def _looks_like_point(point: object) -> bool:
    """A result point: its prompt length and at least one loop's summary with a first run."""
    if not isinstance(point, dict) or not isinstance(point.get("prompt_tokens"), int):
        return False
    loops = [v for k, v in point.items() if k in ("nocache", "naive", "iobinding")]
    return bool(loops) and all(
        isinstance(v, dict)
        and isinstance(v.get("first_run"), dict)
        and isinstance(v["first_run"].get("latencies_s"), list)
        for v in loops
    )


def _looks_like_result(result: object) -> bool:
    return (
        _looks_like_point(result)
        and isinstance(result, dict)
        and isinstance(result.get("max_new_tokens"), int)
        and "device" in result
    )


def _finite(value: Any) -> Any:
    """JSON has no NaN: a figure that has none (a perplexity of nothing) is saved as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
