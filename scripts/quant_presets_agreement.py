"""docs/converter.md's per-preset table: GGUF files of one model in several quantization presets,
each converted and compared with the numpy reference (and, optionally, with llama.cpp).

    .venv/bin/python scripts/quant_presets_agreement.py FILE.gguf [FILE.gguf ...] \\
        [--llama-python /path/to/venv-with-llama-cpp-python/bin/python]

Make the files with llama.cpp's quantizer, e.g. llama-cpp-python's llama_model_quantize with
allow_requantize from the default model's GGUF (see the docs). Per file: the tensor types,
top-1 agreement and max |logit diff| with the reference over 256 tokens of real text, the
median time of one decode step (2 threads), and llama.cpp's own top-1 agreement with the
reference when --llama-python is given (it quantizes activations to 8 bits, so it is lower).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chatapp.convert.converter import convert_gguf
from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.preflight import read_header, type_name
from chatapp.engine.bench.run import filler_text
from chatapp.engine.text.chat import ChatTokenizer
from scripts.converter_agreement import decode_step_ms, empty_feeds
from tests.convert.reference import ReferenceModel

TOKENS = 256
LLAMA_CPP_LOGITS = """
import sys, numpy as np, llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], logits_all=True, n_ctx=512, n_threads=2,
                      verbose=False)
ids = [int(i) for i in sys.argv[3].split(",")]
llm.eval(ids)
np.save(sys.argv[2], np.array(llm.scores[: len(ids)], dtype=np.float32))
"""


def llama_cpp_logits(python: str, gguf: Path, ids: list[int], work: Path) -> np.ndarray:
    out = work / "llama_cpp_logits.npy"
    joined = ",".join(map(str, ids))
    subprocess.run([python, "-c", LLAMA_CPP_LOGITS, str(gguf), str(out), joined], check=True)
    return np.load(out)


def types_of(gguf: Path) -> str:
    counts = collections.Counter(type_name(t.type_id) for t in read_header(gguf).tensors)
    return ", ".join(f"{k} {v}" for k, v in counts.most_common())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf", type=Path, nargs="+")
    parser.add_argument("--llama-python", default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    rows = []
    for n, gguf in enumerate(args.gguf):
        folder = convert_gguf(gguf, work / f"model{n}")
        ids = ChatTokenizer.from_folder(folder).prompt_ids(filler_text())[:TOKENS]
        with np.errstate(over="ignore"):
            ref = ReferenceModel(GGUFModel(gguf)).logits(ids)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        session = ort.InferenceSession(str(folder / "model.onnx"), opts)
        logits = session.run(["logits"], empty_feeds(session, ids))[0][0]
        row = {
            "file": gguf.name,
            "types": types_of(gguf),
            "top1": float((logits.argmax(-1) == ref.argmax(-1)).mean()),
            "max_diff": float(np.abs(logits - ref).max()),
            "decode_ms": decode_step_ms(session),
        }
        if args.llama_python:
            theirs = llama_cpp_logits(args.llama_python, gguf, ids, work)
            row["llama_cpp_top1"] = float((theirs.argmax(-1) == ref.argmax(-1)).mean())
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    print(
        "| file | tensor types | top-1 = reference | max \\|logit diff\\| | decode step | "
        "llama.cpp top-1 |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        theirs = f"{r['llama_cpp_top1']:.1%}" if "llama_cpp_top1" in r else "-"
        print(
            f"| {r['file']} | {r['types']} | {r['top1']:.1%} | {r['max_diff']:.4f} | "
            f"{r['decode_ms']:.1f} ms | {theirs} |"
        )


if __name__ == "__main__":
    main()
