"""One-off check against llama.cpp itself: the tiny GGUF of each family (tests/tiny_families.py)
through llama-cpp-python, through our converter, and through the numpy reference.

    .venv/bin/python scripts/llamacpp_families.py --llama-python /work/venvs/llama/bin/python

llama-cpp-python runs in its own environment (it is not a project dependency); this script
calls it in a subprocess. llama.cpp keeps F32 weights and, here, an F32 KV cache, so the
differences left are its own float32 arithmetic (and GELU from an f16 table for Gemma).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.gguf_file import GGUFModel
from tests.convert.reference import ReferenceModel
from tests.tiny_families import FAMILIES, write_family_gguf

LLAMA_CPP = """
import sys, json, numpy as np
from llama_cpp import Llama
path, n_ctx, ids, out = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
llm = Llama(model_path=path, n_ctx=n_ctx, logits_all=True, n_threads=2, type_k=0, type_v=0,
            verbose=False, n_batch=n_ctx, n_ubatch=n_ctx)
llm.eval(ids)
np.save(out, np.array(llm.scores[: len(ids)], dtype=np.float64))
"""


def llama_cpp_logits(python: str, gguf: Path, n_ctx: int, ids: list[int], work: Path) -> np.ndarray:
    out = work / "llama_cpp.npy"
    subprocess.run(
        [python, "-c", LLAMA_CPP, str(gguf), str(n_ctx), json.dumps(ids), str(out)],
        check=True,
        capture_output=True,
    )
    return np.load(out)


def onnx_logits(folder: Path, spec: object, ids: list[int]) -> np.ndarray:
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": np.array([ids]), "attention_mask": np.ones((1, len(ids)), np.int64)}
    empty = np.zeros((1, spec.n_kv_heads, 0, spec.head_dim), np.float32)  # type: ignore[attr-defined]
    for i in range(spec.n_layers):  # type: ignore[attr-defined]
        feeds[f"past_key_values.{i}.key"] = feeds[f"past_key_values.{i}.value"] = empty
    return session.run(["logits"], feeds)[0][0]


def compare(a: np.ndarray, b: np.ndarray) -> str:
    return f"{np.abs(a - b).max():.1e} / {(a.argmax(-1) == b.argmax(-1)).mean():.0%}"


def rows() -> list[tuple[str, str, dict[str, Any], int, bool]]:
    """(label, family, writer changes, tokens, llama.cpp context = the original one)."""
    out = []
    for name in FAMILIES:
        for qtype in ("F32", "Q8_0"):
            out.append((f"{name} {qtype}", name, {"qtype": qtype, "embed_qtype": qtype}, 24, False))
    # LongRoPE's short factors: llama.cpp takes them when its context (which it rounds up to
    # a multiple of 256) is at most the original one.
    short = {"qtype": "F32", "embed_qtype": "F32", "original_context": 256, "context": 1024}
    out.append(("phi4-mini F32, short factors", "phi4-mini", short, 12, True))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llama-python", default="/work/venvs/llama/bin/python")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    print("| file | llama.cpp vs reference | ours vs reference | ours vs llama.cpp | logit scale |")
    print("|---|---|---|---|---|")
    for n, (label, name, changes, length, original) in enumerate(rows()):
        gguf = write_family_gguf(work / f"{n}.gguf", name, **changes)
        spec = GGUFModel(gguf).spec
        folder = convert_gguf(gguf, work / f"{n}", ConvertOptions())
        ids = [int(i) for i in np.random.default_rng(1).integers(3, spec.vocab_size, length)]
        n_ctx = int(changes.get("original_context", 0)) if original else spec.context_length
        ref = ReferenceModel(gguf).logits(ids)
        ours = onnx_logits(folder, spec, ids)
        theirs = llama_cpp_logits(args.llama_python, gguf, n_ctx, ids, work)
        print(
            f"| {label} | {compare(theirs, ref)} | {compare(ours, ref)} | "
            f"{compare(ours, theirs)} | {np.abs(ref).max():.1f} |"
        )


if __name__ == "__main__":
    main()
