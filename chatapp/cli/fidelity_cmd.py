"""`chatapp bench --fidelity`: a real text through the model, each precision's logits against
the float64 reference of its GGUF (session/fidelity.py; docs/engine.md, "Fidelity")."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from chatapp.cli.errors import UserError
from chatapp.engine.guards import PRECISIONS
from chatapp.session import arg_checks as checks
from chatapp.session.engine_service import call


def add_fidelity_args(bench: argparse.ArgumentParser) -> None:
    bench.add_argument(
        "--fidelity",
        action="store_true",
        help="instead of the loops: a real text (about 3,000 tokens) through the model, each "
        "precision's logits, as a prompt and as decode steps, against the float64 reference of "
        "--peer-gguf (mean and 99th percentile KL divergence, top-1 agreement, perplexity), in "
        "windows of --context tokens (default 512); --peer llamacpp adds llama.cpp's logits",
    )
    bench.add_argument(
        "--fidelity-windows",
        type=checks.whole(1, 1000, "a number of windows"),
        default=None,
        metavar="N",
        help="--fidelity reads at most N windows of the text (default: all)",
    )


def run_fidelity_bench(args: argparse.Namespace, model_dir: Path) -> int:
    from chatapp.convert.default_model import FOLDER_NAME, bundled_gguf
    from chatapp.engine.bench.fidelity import WINDOW
    from chatapp.session.fidelity import llama_cpp_logits, markdown_table, measure_fidelity

    if (
        args.report is not None
        or args.peer not in ("", "llamacpp")
        or args.sweep
        or args.context_tokens
    ):
        raise UserError(
            "--fidelity measures on its own: leave out --report and --sweep (--peer llamacpp "
            "adds llama.cpp's logits)."
        )
    gguf = args.peer_gguf
    if gguf is None and model_dir.expanduser().name == FOLDER_NAME:
        gguf = bundled_gguf()  # the default model's own
    if gguf is None:
        raise UserError(
            "--fidelity needs the GGUF the folder was converted from: --peer-gguf FILE."
        )
    if not gguf.is_file():
        raise UserError(f"--peer-gguf {gguf} is not a file.")
    others = {}
    if args.peer == "llamacpp":
        python = args.peer_python or sys.executable
        others["llama.cpp"] = llama_cpp_logits(python, gguf, args.threads)
    result = call(  # on an engine service, as every bench measurement
        "fidelity",
        lambda put, _stopped: measure_fidelity(
            model_dir,
            gguf,
            precisions=(args.precision, *[p for p in PRECISIONS if p != args.precision]),
            window=args.context or WINDOW,
            max_windows=args.fidelity_windows,
            threads=args.threads,
            others=others,
            progress=put,
        ),
        lambda msg: print(msg, file=sys.stderr),
    )
    print(json.dumps(result.to_dict(), indent=2) if args.json else markdown_table(result))
    return 0
