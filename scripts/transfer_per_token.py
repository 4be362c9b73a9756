"""Bytes per decode token that cross between host and device, per loop and context length.

The loops count what they feed and fetch; this runs them with the CPU provider on a device
marked as having its own memory, so the meter reads what a GPU would move without needing one:

    .venv/bin/python scripts/transfer_per_token.py [MODEL_DIR] --contexts 128,1024,4096
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from chatapp.convert.default_model import default_model_dir
from chatapp.engine.devices import CPU, create_session, session_options
from chatapp.engine.loop_factory import make_loop
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.modes import MODES
from chatapp.units import fmt_bytes

EMULATED = dataclasses.replace(CPU, name="own-memory", own_memory=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=None)
    parser.add_argument("--contexts", default="128,1024,4096")
    args = parser.parse_args()
    info = open_model_folder(args.model or default_model_dir())
    contexts = [int(c) for c in args.contexts.split(",")]
    session = create_session(info.onnx_path, CPU, session_options())
    print(f"{info.describe()}; KV {fmt_bytes(info.kv_bytes_per_token())} per token of context")
    heads = [f"{m.label} {way}" for m in MODES for way in ("host→device", "device→host")]
    print("| context | " + " | ".join(heads) + " |")
    print("|---:|" + "---:|" * len(heads))
    for context in contexts:
        row = []
        for mode in MODES:
            loop = make_loop(mode, session, info, EMULATED, context + 8)
            loop.forward(list(range(10, 10 + context)))
            step = loop.forward([42])
            row += [fmt_bytes(step.h2d_bytes), fmt_bytes(step.d2h_bytes)]
        print(f"| {context} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
