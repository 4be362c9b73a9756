"""Is a fast decode step bound by arithmetic or by reading the weights? One GgufMatMul of K = 4096
on one thread, 1, 2 and 4 activation rows, its weights small enough for L2, for L3, and far larger
than any cache (the same 512 rows repeated): the weight bytes a second of one thread's CPU time
gets through. About equal in cache and from memory: the kernel's arithmetic is the limit.

    PYTHONPATH=. .venv/bin/python scripts/step_hot_cold.py [--types Q4_K,Q6_K,Q4_1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from tests.convert.native_library import session  # noqa: E402
from tests.convert.test_native_kernels import gguf_blocks, matmul_model  # noqa: E402

K = 4096
SIZES = (("L2", 512), ("L3", 4096), ("memory", 262144))


def rate(qtype: str, rows_of_weight: int, rows: int) -> tuple[float, float]:
    """(weight MB, GB/s of one thread's CPU time) for `rows` activation rows, best of 3."""
    raw = np.tile(gguf_blocks(qtype, 512, K), (rows_of_weight // 512, 1))
    run = session(matmul_model(qtype, raw, K), threads=1, precision="fast").run
    x = np.random.default_rng(1).normal(size=(1, rows, K)).astype(np.float32)
    for _ in range(3):
        run(None, {"x": x})
    repeats = max(3, int(2e9 // raw.nbytes))
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        for _ in range(repeats):
            run(None, {"x": x})
        best = min(best, (time.thread_time() - started) / repeats)
    return raw.nbytes / 1e6, raw.nbytes / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default="Q4_K,Q6_K")
    args = parser.parse_args()
    print(f"load {os.getloadavg()}")
    for qtype in args.types.split(","):
        for label, n in SIZES:
            cells = []
            for rows in (1, 2, 4):
                mb, gbs = rate(qtype, n, rows)
                cells.append(f"{rows} rows {gbs:5.1f} GB/s")
            print(f"{qtype} {label} ({mb:.0f} MB): " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
