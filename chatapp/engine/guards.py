"""How many threads an engine may be asked for, and which prompt precisions.

ONNX Runtime starts one OS thread per intra-op thread; past a few per core they only
contend (and 1000 of them reserve gigabytes of stacks), so at most `THREADS_PER_CPU` per
logical CPU are accepted (devices.check_threads, when a session's options are made). The
context asked for is checked with the rest of memory (memory.py). The command line imports
this module: it must stay light.
"""

from __future__ import annotations

import os

THREADS_PER_CPU = 4


def max_threads() -> int:
    return THREADS_PER_CPU * (os.cpu_count() or 1)


# How the GGUF kernels multiply a prompt's rows (docs/engine.md, "Prompt precision"): "float"
# (float32 activations, the default: a prompt's logits as exact as the stock graph's) or
# "int16" (a decode step's int16 activations per block of 32: about twice as fast with AVX-512
# VNNI, slower with AVX2 only). The library reads it from the session's config
# (devices.session_options).
PROMPT_PRECISIONS = ("float", "int16")
