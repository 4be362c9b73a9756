"""How many threads an engine may be asked for, and which precisions.

ONNX Runtime starts one OS thread per intra-op thread; past a few per core they only
contend (and 1000 of them reserve gigabytes of stacks), so at most `THREADS_PER_CPU` per
logical CPU are accepted (devices.check_threads, when a session's options are made). The
context asked for is checked with the rest of memory (model_description.py). The command line
imports this module: it must stay light.
"""

from __future__ import annotations

import os

THREADS_PER_CPU = 4


def max_threads() -> int:
    return THREADS_PER_CPU * (os.cpu_count() or 1)


# How the GGUF kernels multiply (docs/engine.md, "Precision"): "fast" (8-bit activations with
# one scale per block, as llama.cpp multiplies: the default) or "exact" (float32 activations in
# prompts, int16 in decode steps: the arithmetic from before 8-bit, a little closer to the float
# model and slower). The library reads it from the session's config (devices.session_options);
# a graph without GGUF kernels (the stock ONNX graph, another device) has no such choice.
PRECISIONS = ("fast", "exact")
DEFAULT_PRECISION = "fast"
# The default where a caller names none: this variable when it names a precision (the library
# reads the same one; scripts, experiments and tests of one precision), else DEFAULT_PRECISION.
PRECISION_ENV = "CHATAPP_GGUF_PRECISION"


def default_precision() -> str:
    """The precision an engine or session gets when none is asked for (an unknown value in the
    environment is ignored here; asked for by name, it is refused)."""
    named = os.environ.get(PRECISION_ENV, "").strip().lower()
    return named if named in PRECISIONS else DEFAULT_PRECISION


# How figures name it (the model line, under an answer, reports).
PRECISION_LABELS = {"fast": "fast 8-bit", "exact": "exact"}
