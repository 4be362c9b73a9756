"""`chatapp bench --parallel N` and `--speculative`: measurements that replace the loops'
comparison, each on one IO-Binding engine in one process."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from chatapp.cli.errors import UserError

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine


def measured_alone(args: argparse.Namespace, what: str) -> None:
    """These measurements take none of the loops' comparison's options."""
    if args.report is not None or args.peer or args.sweep or args.context_tokens:
        raise UserError(f"{what} measures on its own: leave out --report, --peer, --sweep.")


def run_parallel_bench(args: argparse.Namespace, engine: Engine) -> int:
    from chatapp.engine.bench.parallel import measure_parallel, parallel_sentences

    print(f"chatapp bench: 1 client, then {args.parallel} together", file=sys.stderr)
    result = measure_parallel(engine, args.parallel, args.max_new_tokens)
    if args.json:
        named = {"model": engine.info.name, "precision": engine.precision_in_effect}
        print(json.dumps({**named, **result.to_dict()}, indent=2))
    else:
        print("\n".join(parallel_sentences(result)))
    return 0


def run_speculative_bench(args: argparse.Namespace, engine: Engine) -> int:
    from chatapp.engine.bench.speculative import measure_speculative, speculative_lines

    print("chatapp bench: plain against speculative decoding", file=sys.stderr)
    result = measure_speculative(engine, args.max_new_tokens, args.repeats)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print("\n".join(speculative_lines(result)))
    return 0
