"""Checks shared by the device tests: greedy traces of a loop and the bytes each step must move."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.loops import KVLoop, Step
from chatapp.engine.model_folder.model import ModelInfo

PROMPT = [int(x) for x in np.random.default_rng(7).integers(3, 260, size=23)]
FOLLOW_UP = [*PROMPT[:15], 17, 18, 19, 20]  # diverges from PROMPT: the cache must be cut

# The layouts a model folder can have, as converter options.
LAYOUTS = {
    "shared-buffer": ConvertOptions(),
    "concat": ConvertOptions(attention="standard"),
    "static-w1": ConvertOptions(kv_layout="static", context_length=96, window=1),
    "static-w3": ConvertOptions(kv_layout="static", context_length=96, window=3),
}


def convert_layouts(gguf: Path, root: Path) -> dict[str, Path]:
    return {name: convert_gguf(gguf, root / name, opts) for name, opts in LAYOUTS.items()}


@dataclass
class Trace:
    tokens: list[int]
    logits: np.ndarray  # [n, vocab]: the row each token was chosen from
    steps: list[Step]  # the decode steps (after the prompt)


def greedy_trace(loop: KVLoop, prompt: list[int], n: int) -> Trace:
    """n greedy tokens after `prompt`, reusing whatever prefix the loop has cached."""
    loop.prepare(prompt)
    step = loop.forward(prompt[len(loop.cached) :], all_logits=True)
    rows = [step.logits[-1].copy()]
    tokens: list[int] = []
    steps: list[Step] = []
    for _ in range(n):
        tokens.append(int(rows[-1].argmax()))
        step = loop.forward([tokens[-1]])
        steps.append(step)
        rows.append(step.logits.copy())  # the loop may reuse its logits buffer
    return Trace(tokens, np.array(rows[:-1]), steps)


def iobinding_step_bytes(info: ModelInfo, total: int) -> tuple[int, int]:
    """(host->device, device->host) of an IO-Binding decode step at `total` tokens: the token,
    the mask (and positions, and which row gets logits) in, one row of float32 logits out;
    never the KV."""
    rows = 2 + (1 if info.has_position_ids else 0) + (1 if info.io.logits_positions else 0)
    h2d = 8 * (rows - 1) + 8 * total  # int64 ids (+ positions, + logits row), the mask
    return h2d, 4 * info.vocab_size


def naive_kv_bytes(info: ModelInfo, past_len: int) -> int:
    """Bytes of every layer's past keys and values for `past_len` tokens."""
    return info.kv_bytes_per_token() * past_len
