"""The comparison table's cells (chatapp/gui/compare/table.py)."""

from __future__ import annotations

from typing import Any

from chatapp.gui.compare.table import TABLE_ROWS, table_text

PROMPT_ROW = next(r for r in TABLE_ROWS if r[1] == "prompt_tokens_per_s")


def summary(**figures: Any) -> dict[str, Any]:
    return {"repeats": 3, "spread": {"ttft_s": [0.1, 0.3]}, **figures}


def test_prompt_speed_sits_beside_time_to_first_token() -> None:
    keys = [r[1] for r in TABLE_ROWS]
    assert keys.index("prompt_tokens_per_s") == keys.index("ttft_s") + 1
    _label, key, scale, fmt = PROMPT_ROW
    assert table_text(summary(prompt_tokens_per_s=42 / 0.2), key, scale, fmt) == "210"


def test_a_result_saved_without_prompt_speed_says_so() -> None:
    _label, key, scale, fmt = PROMPT_ROW
    assert table_text(summary(ttft_s=0.2), key, scale, fmt) == "n/a"
    assert table_text(summary(ttft_s=0.2), "ttft_s", 1000.0, "{:.0f}") == "200 (100–300)"
