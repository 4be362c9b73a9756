"""Sizes an engine is asked to allocate, checked before anything is allocated.

Threads: ONNX Runtime starts one OS thread per intra-op thread; past a few per core they only
contend (and 1000 of them reserve gigabytes of stacks), so at most `THREADS_PER_CPU` per
logical CPU are accepted. KV cache: the IO-Binding loop allocates it for the whole context up
front, so a folder claiming a huge context (or a large `--context`) is refused when that cache
would take more than half of this computer's memory, with the figure, rather than failing deep
inside numpy or onnxruntime.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from chatapp.engine.errors import EngineError
from chatapp.system_memory import physical_memory

if TYPE_CHECKING:  # the command line imports this module; it must stay light
    from chatapp.engine.model_folder.model import ModelInfo

THREADS_PER_CPU = 4


def max_threads() -> int:
    return THREADS_PER_CPU * (os.cpu_count() or 1)


def check_threads(threads: int | None) -> None:
    if threads is None:
        return
    cap = max_threads()
    if isinstance(threads, bool) or not isinstance(threads, int) or not 1 <= threads <= cap:
        raise EngineError(
            f"Threads must be from 1 to {cap} ({THREADS_PER_CPU} per CPU here); got {threads}."
        )


def check_context(max_context: int | None) -> None:
    if max_context is not None and (
        isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1
    ):
        raise EngineError(f"The context must be at least 1 token; got {max_context}.")


def check_kv_memory(info: ModelInfo, context: int) -> None:
    need = info.kv_bytes_per_token() * context
    total = physical_memory()
    if total is not None and need > total // 2:
        raise EngineError(
            f"The KV cache for {context} tokens of {info.name} would take {need >> 20} MB, "
            f"more than half of this computer's {total >> 20} MB; choose a smaller context."
        )
