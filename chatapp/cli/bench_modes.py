"""`chatapp bench --parallel N` and `--speculative`: measurements that replace the loops'
comparison, each on one IO-Binding engine in one process."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from chatapp.cli.errors import UserError
from chatapp.engine.modes import Mode

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine


def _engine(args: argparse.Namespace, model_dir: Path, what: str) -> Engine:
    from chatapp.engine.engine import Engine

    if args.report is not None or args.peer or args.sweep or args.context_tokens:
        raise UserError(f"{what} measures on its own: leave out --report, --peer, --sweep.")
    return Engine(
        model_dir,
        args.device,
        Mode.IOBINDING,
        args.threads,
        args.context,
        onnx_file=args.onnx_file,
        precision=args.precision,
    )


def run_parallel_bench(args: argparse.Namespace, model_dir: Path) -> int:
    from chatapp.engine.bench.parallel import measure_parallel, parallel_sentences

    engine = _engine(args, model_dir, "--parallel")
    print(f"chatapp bench: 1 client, then {args.parallel} together", file=sys.stderr)
    result = measure_parallel(engine, args.parallel, args.max_new_tokens)
    if args.json:
        named = {"model": engine.info.name, "precision": engine.precision_in_effect}
        print(json.dumps({**named, **result.to_dict()}, indent=2))
    else:
        print("\n".join(parallel_sentences(result)))
    return 0


def run_speculative_bench(args: argparse.Namespace, model_dir: Path) -> int:
    from chatapp.engine.bench.speculative import measure_speculative, speculative_lines

    engine = _engine(args, model_dir, "--speculative")
    print("chatapp bench: plain against speculative decoding", file=sys.stderr)
    result = measure_speculative(engine, args.max_new_tokens, args.repeats)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print("\n".join(speculative_lines(result)))
    return 0
