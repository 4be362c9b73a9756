"""How many threads an engine may be asked for.

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
