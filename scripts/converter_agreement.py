"""Reproduce docs/converter.md's precision table: each converter variant of the default model
against the numpy reference (top-1 agreement, max logit difference, perplexity, decode step),
for the text read as one prompt and fed one token at a time (decode steps take their own
branch of the graph in the default conversion, step_split.py).

    .venv/bin/python scripts/converter_agreement.py [WORD ...]

WORDs pick the variants whose label contains one of them (e.g. `default`); none: all.
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
from chatapp.convert.reference import ReferenceModel
from chatapp.engine import devices
from chatapp.engine.bench.run import filler_text
from chatapp.engine.sampling import token_logprobs
from chatapp.engine.text.chat import ChatTokenizer

VARIANTS = {
    "steps on 2 int8 levels, prompts float / Q8_0 head on 2 levels in steps, 3 in prompts "
    "(default)": ConvertOptions(),
    "float / same head (--int8-levels head)": ConvertOptions(int8_levels="head"),
    "3 int8 levels / same head (--int8-levels all)": ConvertOptions(int8_levels="all"),
    "float / int8 head": ConvertOptions(lm_head_int8=True),
    "int8 / int8 head": ConvertOptions(accuracy_level=4, lm_head_int8=True),
    "int8 / exact head on int8 levels": ConvertOptions(accuracy_level=4),
    "native kernels: int16 activations in steps, float in prompts (--native)": ConvertOptions(
        graph="native"
    ),
}


def empty_feeds(session: ort.InferenceSession, ids: list[int]) -> dict[str, np.ndarray]:
    feeds = {"input_ids": np.array([ids]), "attention_mask": np.ones((1, len(ids)), np.int64)}
    for inp in session.get_inputs():
        if inp.name.startswith("past_key_values"):
            feeds[inp.name] = np.zeros((1, inp.shape[1], 0, inp.shape[3]), np.float32)
    return feeds


def step_logits(session: ort.InferenceSession, ids: list[int]) -> np.ndarray:
    """Logits [S, V] with the tokens fed one at a time, the KV cache carried (teacher forcing)."""
    names = [o.name for o in session.get_outputs()]
    feeds = empty_feeds(session, ids[:1])
    rows = []
    for n in range(len(ids)):
        out = dict(zip(names, session.run(None, feeds), strict=True))
        rows.append(out["logits"][0, -1])
        if n + 1 < len(ids):
            feeds = {
                "input_ids": np.array([[ids[n + 1]]]),
                "attention_mask": np.ones((1, n + 2), np.int64),
            }
            for name in names[1:]:
                feeds[name.replace("present", "past_key_values")] = out[name]
    return np.stack(rows)


def agreement(logits: np.ndarray, ref: np.ndarray, ids: list[int]) -> str:
    top1 = float((logits.argmax(-1) == ref.argmax(-1)).mean())
    ppl = float(np.exp(-token_logprobs(logits[:-1], ids[1:]).mean()))
    diff = float(np.abs(logits - ref).max())
    return f"{top1:.1%} | {diff:.4f} | {ppl:.3f}"


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
    wanted = sys.argv[1:]
    variants = {k: v for k, v in VARIANTS.items() if not wanted or any(w in k for w in wanted)}
    for n, (label, options) in enumerate(variants.items()):
        folder = convert_gguf(gguf, work / f"variant{n}", options)
        if not ids:
            ids = ChatTokenizer.from_folder(folder).encode(filler_text())[:700]
            ref_logits = reference.logits(ids)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 2
        # The native kernels' arithmetic this table describes: exact (fast would be 8-bit).
        opts.add_session_config_entry(devices.PRECISION_CONFIG, "exact")
        devices.register_if_needed(folder / "model.onnx", True, "the CPU", opts)
        session = ort.InferenceSession(str(folder / "model.onnx"), opts)
        assert ref_logits is not None
        prompt = session.run(["logits"], empty_feeds(session, ids))[0][0]
        steps = step_logits(session, ids)
        rows.append(
            f"| {label} | {agreement(prompt, ref_logits, ids)} | "
            f"{agreement(steps, ref_logits, ids)} | {decode_step_ms(session):.1f} ms |"
        )
    assert ref_logits is not None
    ref_ppl = float(np.exp(-token_logprobs(ref_logits[:-1], ids[1:]).mean()))
    print(f"{len(ids)} tokens of real text; the reference's perplexity {ref_ppl:.3f}")
    print(
        "| layers / head | prompt: top-1 = reference | max |logit diff| | perplexity "
        "| steps: top-1 = reference | max |logit diff| | perplexity | decode step |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
