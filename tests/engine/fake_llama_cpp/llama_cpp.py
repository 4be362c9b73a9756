"""A stand-in for llama-cpp-python in the bench-peer tests: the same calls the child makes.

Its "model" predicts (last token * 7 + 3) % vocab, so the expected greedy tokens are known.
FAKE_LLAMA_EXTRA_BUFFERS_FAIL=1 makes loading with the extra buffer types (llama.cpp's AMX and
repacked layouts, on by default) fail, as its AMX path crashed on one machine. With
flash_attn=True its predicted token's logit is 2, not 1.
"""

from __future__ import annotations

import ctypes
import os
import types
from collections.abc import Sequence

__version__ = "fake-0.0"
VOCAB = 50


def _model_default_params() -> types.SimpleNamespace:
    return types.SimpleNamespace(use_extra_bufts=True)


# The low-level module (llama_cpp.llama_cpp) whose defaults Llama reads, as the real one does.
llama_cpp = types.SimpleNamespace(llama_model_default_params=_model_default_params)


class _Context:
    def __init__(self) -> None:
        self.logits = (ctypes.c_float * VOCAB)()

    def get_logits(self) -> ctypes._Pointer[ctypes.c_float]:
        return ctypes.cast(self.logits, ctypes.POINTER(ctypes.c_float))


class Llama:
    def __init__(self, model_path: str, **settings: object) -> None:
        if not model_path.endswith(".gguf"):
            raise ValueError("not a GGUF")
        params = llama_cpp.llama_model_default_params()
        if params.use_extra_bufts and os.environ.get("FAKE_LLAMA_EXTRA_BUFFERS_FAIL") == "1":
            raise RuntimeError("extra buffer types failed")
        self._ctx = _Context()
        self._top = 2.0 if settings.get("flash_attn") else 1.0
        self.scores = []

    def n_vocab(self) -> int:
        return VOCAB

    def reset(self) -> None:
        self.scores: list[list[float]] = []  # every position's logits (logits_all=True)

    def eval(self, tokens: Sequence[int]) -> None:
        for i in range(VOCAB):
            self._ctx.logits[i] = 0.0
        self._ctx.logits[(tokens[-1] * 7 + 3) % VOCAB] = 1.0
        for token in tokens:
            top = (token * 7 + 3) % VOCAB
            self.scores.append([self._top if i == top else 0.0 for i in range(VOCAB)])
