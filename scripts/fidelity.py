"""Fidelity, measured: a real text through a model, every scored position's logits against the
float64 reference of its GGUF, for chatapp's precisions (fast, exact; read as a prompt and as
decode steps) and, optionally, llama.cpp's own logits on the same GGUF. Prints a Markdown table
ready for docs/engine.md ("Fidelity").

    .venv/bin/python scripts/fidelity.py                      # the default model
    .venv/bin/python scripts/fidelity.py --model FOLDER --gguf GGUF [--llama-python PYTHON]
        [--windows N] [--window 512] [--threads 2] [--ways prompt,steps] [--json]

The text is chapter I of Alice's Adventures in Wonderland (chatapp/resources/fidelity_text.txt,
about 3,000 tokens): windows of --window tokens, the second half of each scored, as llama.cpp's
perplexity tool does (chatapp/engine/fidelity.py). --llama-python names a Python that has
llama-cpp-python (scripts/fidelity_llamacpp.py runs in it, with every position's logits kept).
A folder converted from a random-weight GGUF (scripts/shaped_gguf.py) gives figures that say
how the arithmetic rounds, not how a trained model's answers change: --note says so in the table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from chatapp.convert.default_model import bundled_gguf, default_model_dir  # noqa: E402
from chatapp.engine.engine import Engine  # noqa: E402
from chatapp.engine.fidelity import WAYS, WINDOW, scored_positions  # noqa: E402
from chatapp.engine.guards import PRECISIONS  # noqa: E402
from chatapp.session.fidelity import (  # noqa: E402
    WindowLogits,
    fidelity_text,
    markdown_table,
    measure_fidelity,
    text_windows,
)

CHILD = ROOT / "scripts" / "fidelity_llamacpp.py"


def llama_logits(
    python: str, gguf: Path, windows: list[list[int]], window: int, threads: int
) -> np.ndarray:
    """llama.cpp's logits of the scored rows of every window, [windows, scored, vocab]."""
    scored = scored_positions(window)
    request = {"windows": windows, "first": scored.start, "last": scored.stop}
    with tempfile.TemporaryDirectory(prefix="chatapp-fidelity-") as folder:
        out = Path(folder) / "llama.npy"
        done = subprocess.run(
            [python, str(CHILD), str(gguf), str(out), str(threads)],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            sys.exit(f"fidelity: llama.cpp failed: {done.stderr.strip() or done.stdout.strip()}")
        print(f"llama.cpp: {done.stdout.strip()}", file=sys.stderr)
        return np.load(out)


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
        probe = Engine(folder, threads=args.threads, max_context=args.window)
        windows = text_windows(probe, fidelity_text(), args.window)[: args.windows]
        del probe
        logits = llama_logits(args.llama_python, gguf, windows, args.window, args.threads or 2)
        others["llama.cpp"] = lambda index, _ids: logits[index]
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
