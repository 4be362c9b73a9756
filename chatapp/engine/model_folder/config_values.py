"""Values read from a model folder's JSON and graph, checked: one-line errors naming the file
and the key instead of a ValueError from `int("abc")` or a KV cache sized by `-5`."""

from __future__ import annotations

from typing import Any

from chatapp.engine.errors import ModelError

MAX_CONTEXT = 1 << 24
MAX_VOCAB = 1 << 24
MAX_LAYERS = 1024
MAX_HEADS = 4096
MAX_HEAD_DIM = 4096


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def whole_number(value: Any, where: str, low: int = 1, high: int = MAX_CONTEXT) -> int:
    """`value` as an int in [low, high]; integral floats (2048.0) are accepted."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ModelError(
            f"{where} is {_show(value)}; a whole number from {low} to {high} was expected."
        )
    return value


def token_ids(value: Any, where: str, vocab_size: int) -> list[int]:
    """An id or a list of ids, each inside the vocabulary."""
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    return [whole_number(v, where, 0, max(vocab_size - 1, 0)) for v in values]


def section(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """A nested object that may be absent; anything but an object is an error."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelError(f"{where} '{key}' is {_show(value)}; a JSON object was expected.")
    return value


def check_head_counts(config: dict[str, Any], where: str) -> None:
    """config.json's head counts, before transformers reads them (0 KV heads made it fail
    with "integer modulo by zero")."""
    counts = {}
    for key in ("num_attention_heads", "num_key_value_heads"):
        if config.get(key) is not None:
            counts[key] = whole_number(config[key], f"{where}'s {key}", 1, MAX_HEADS)
    heads, kv_heads = counts.get("num_attention_heads"), counts.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise ModelError(
            f"{where} has {heads} attention heads, which do not split into groups for its "
            f"{kv_heads} KV heads."
        )
