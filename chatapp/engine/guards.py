"""Sizes an engine is asked to allocate, checked before anything is allocated.

Threads: ONNX Runtime starts one OS thread per intra-op thread; past a few per core they only
contend (and 1000 of them reserve gigabytes of stacks), so at most `THREADS_PER_CPU` per
logical CPU are accepted (devices.check_threads, when a session's options are made). The
context asked for must be a whole number of tokens; whether its KV cache fits is memory.py's
check (`check_kv_memory`). The command line imports this module: it must stay light.
"""

from __future__ import annotations

import os

from chatapp.engine.errors import EngineError

THREADS_PER_CPU = 4


def max_threads() -> int:
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def check_context(max_context: int | None) -> None:
    if max_context is not None and (
        isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1
    ):
        raise EngineError(f"The context must be at least 1 token; got {max_context}.")
