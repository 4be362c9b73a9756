"""Fidelity, measured: a real text through a model, every scored position's logits against the
float64 reference of its GGUF, for chatapp's precisions (fast, exact; read as a prompt and as
decode steps) and, optionally, llama.cpp's own logits on the same GGUF. Prints a Markdown table
ready for docs/engine.md ("Fidelity").

    .venv/bin/python scripts/fidelity.py                      # the default model
    .venv/bin/python scripts/fidelity.py --model FOLDER --gguf GGUF [--llama-python PYTHON]
        [--windows N] [--window 512] [--threads 2] [--ways prompt,steps] [--json]

The text is chapter I of Alice's Adventures in Wonderland (chatapp/resources/fidelity_text.txt,
about 3,000 tokens): windows of --window tokens, the second half of each scored, as llama.cpp's
perplexity tool does (chatapp/engine/bench/fidelity.py). --llama-python names a Python that has
llama-cpp-python (chatapp/engine/bench/llamacpp_logits.py runs in it, every position's logits
kept).
A folder converted from a random-weight GGUF (scripts/shaped_gguf.py) gives figures that say
how the arithmetic rounds, not how a trained model's answers change: --note says so in the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chatapp.convert.default_model import bundled_gguf, default_model_dir  # noqa: E402
from chatapp.engine.bench.fidelity import WAYS, WINDOW  # noqa: E402
from chatapp.engine.guards import PRECISIONS  # noqa: E402
from chatapp.session.fidelity import (  # noqa: E402
    WindowLogits,
    llama_cpp_logits,
    markdown_table,
    measure_fidelity,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default model)")
    parser.add_argument("--gguf", type=Path, default=None, help="the GGUF it was converted from")
    parser.add_argument("--llama-python", default=None, help="a Python with llama-cpp-python")
    parser.add_argument("--window", type=int, default=WINDOW)
    parser.add_argument("--windows", type=int, default=None, help="at most this many windows")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--note", default="", help="a line under the table's heading")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    args = parser.parse_args()
    folder = args.model or default_model_dir()
    gguf = args.gguf or (bundled_gguf() if args.model is None else None)
    if gguf is None:
        parser.error("--gguf: name the GGUF the folder was converted from")
    started, cpu = time.perf_counter(), time.process_time()
    others: dict[str, WindowLogits] = {}
    if args.llama_python:
        others["llama.cpp"] = llama_cpp_logits(args.llama_python, gguf, args.threads)
    result = measure_fidelity(
        folder,
        gguf,
        precisions=[p for p in args.precisions.split(",") if p],
        ways=[w for w in args.ways.split(",") if w],
        window=args.window,
        max_windows=args.windows,
        threads=args.threads,
        others=others,
        progress=lambda message: print(message, file=sys.stderr),
    )
    if args.note:
        result = replace(result, note=args.note)
    print(json.dumps(result.to_dict(), indent=2) if args.json else markdown_table(result))
    print(
        f"fidelity: {time.perf_counter() - started:.0f} s, "
        f"{time.process_time() - cpu:.0f} s of this process's CPU",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
