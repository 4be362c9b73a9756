"""Issue 49's invariance on a real model folder: the checks of tests/engine/test_invariance.py
(which run on the tiny family fixtures and the default model) at a size those tests cannot
afford, e.g. the Gemma 3 270M shape past its sliding window or the 1.1B shape.

    PYTHONPATH=. .venv/bin/python scripts/invariance_check.py FOLDER [--prompt-tokens 300]
        [--context 1024] [--threads 2] [--loops iobinding,naive] [--steps 8]

At the fast precision, on the folder's native graph: every row of a prompt of random token ids
bit-equal to its fresh run when run again, one token a run, after cached prefixes (1, half,
all but one), in pieces (16 and 100); four sequences (the prompt's length, 40, half and 7)
decoded together for `--steps` steps against each alone; a seeded temperature-1 answer fresh,
asked again (its prompt from the cache) and as a follow-up. One line per check; exit status 1
at the first difference. The comparisons are between runs made here: nothing stored.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from chatapp.engine.engine import Engine  # noqa: E402
from tests.engine.test_invariance import (  # noqa: E402
    assert_bits,
    check_batched,
    check_seeded,
    prompt_ids,
    rows_after_cache,
    rows_by_steps,
    rows_fresh,
    rows_in_pieces,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--loops", default="iobinding,naive")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    n = args.prompt_tokens
    if not 8 <= n < args.context - args.steps:
        parser.error("--prompt-tokens must be at least 8 and leave --steps of the --context")
    engine = Engine(args.folder, threads=args.threads, max_context=args.context, precision="fast")
    print(f"{engine.info.name}: {n}-token prompt, context {args.context}", flush=True)
    ids = prompt_ids(n, seed=1)
    try:
        for mode in args.loops.split(","):
            loop = engine.loop(mode)
            fresh = rows_fresh(loop, ids)
            checks: list[tuple[str, Callable[[], np.ndarray]]] = [
                ("run again", partial(rows_fresh, loop, ids)),
                ("one token a run", partial(rows_by_steps, loop, ids)),
            ]
            for cut in sorted({1, n // 2, n - 1}):
                checks.append((f"after {cut} cached", partial(rows_after_cache, loop, ids, cut)))
            for piece in (16, 100):
                checks.append((f"in pieces of {piece}", partial(rows_in_pieces, loop, ids, piece)))
            for what, run in checks:
                started = time.perf_counter()
                assert_bits(run(), fresh, f"{mode}, {what}")
                print(f"{mode}, {what}: {n} rows bit-equal ({time.perf_counter() - started:.1f} s)")
        started = time.perf_counter()
        lengths = (n, 40, n // 2, 7)
        check_batched(engine, [prompt_ids(k, seed=k) for k in lengths], steps=args.steps)
        print(
            f"4 sequences ({', '.join(map(str, lengths))} tokens) batched for {args.steps} steps: "
            f"each step bit-equal to alone ({time.perf_counter() - started:.1f} s)"
        )
        started = time.perf_counter()
        check_seeded(engine, ids[:40])
        print(
            "seeded temperature-1 answer: the same tokens and log-probs fresh, again and as a "
            f"follow-up ({time.perf_counter() - started:.1f} s)"
        )
    except AssertionError as exc:
        print(f"DIFFERENT: {exc}", file=sys.stderr)
        return 1
    print("every check bit-equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
