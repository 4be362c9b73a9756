"""Reproduce docs/converter.md's precision table: each converter variant of the default model
against the numpy reference (top-1 agreement, max logit difference, perplexity, decode step).

    .venv/bin/python scripts/converter_agreement.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.default_model import bundled_gguf
from chatapp.convert.gguf_file import GGUFModel
from chatapp.engine.bench import filler_text
from chatapp.engine.chat import ChatTokenizer
from chatapp.engine.sampling import token_logprobs
from tests.convert.reference import ReferenceModel

VARIANTS = {
    "float / Q8_0 head on exact int8 levels (default)": ConvertOptions(),
    "exact int8 levels / same head (--int8-levels all)": ConvertOptions(int8_levels_layers=True),
    "float / int8 head": ConvertOptions(lm_head_int8=True),
    "int8 / int8 head": ConvertOptions(accuracy_level=4, lm_head_int8=True),
    "int8 / exact head on int8 levels": ConvertOptions(accuracy_level=4),
}


def empty_feeds(session: ort.InferenceSession, ids: list[int]) -> dict[str, np.ndarray]:
    feeds = {"input_ids": np.array([ids]), "attention_mask": np.ones((1, len(ids)), np.int64)}
    for inp in session.get_inputs():
        if inp.name.startswith("past_key_values"):
            feeds[inp.name] = np.zeros((1, inp.shape[1], 0, inp.shape[3]), np.float32)
    return feeds


def decode_step_ms(session: ort.InferenceSession, steps: int = 64) -> float:
    names = [o.name for o in session.get_outputs()]
    out = dict(zip(names, session.run(None, empty_feeds(session, [1] * 32)), strict=True))
    times = []
    for i in range(steps):
        feeds = {
            "input_ids": np.array([[int(out["logits"][0, -1].argmax())]]),
            "attention_mask": np.ones((1, 33 + i), np.int64),
        }
        for name in names[1:]:
            feeds[name.replace("present", "past_key_values")] = out[name]
        t0 = time.perf_counter()
        out = dict(zip(names, session.run(None, feeds), strict=True))
        times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))


def main() -> None:
    gguf = bundled_gguf()
    work = Path(tempfile.mkdtemp())
    reference = ReferenceModel(GGUFModel(gguf))
    rows = []
    ids: list[int] = []
    ref_logits = None
    for n, (label, options) in enumerate(VARIANTS.items()):
        folder = convert_gguf(gguf, work / f"variant{n}", options)
        if not ids:
            ids = ChatTokenizer(folder).encode(filler_text())[:700]
            ref_logits = reference.logits(ids)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        session = ort.InferenceSession(str(folder / "model.onnx"), opts)
        logits = session.run(["logits"], empty_feeds(session, ids))[0][0]
        assert ref_logits is not None
        top1 = float((logits.argmax(-1) == ref_logits.argmax(-1)).mean())
        ppl = float(np.exp(-token_logprobs(logits[:-1], ids[1:]).mean()))
        ref_ppl = float(np.exp(-token_logprobs(ref_logits[:-1], ids[1:]).mean()))
        diff = float(np.abs(logits - ref_logits).max())
        rows.append(
            f"| {label} | {top1:.1%} | {diff:.4f} | {ppl:.3f} (ref {ref_ppl:.3f}) | "
            f"{decode_step_ms(session):.1f} ms |"
        )
    print("| layers / head | top-1 = reference | max |logit diff| | perplexity | decode step |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
