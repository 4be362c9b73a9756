"""The default model in all three KV layouts: the same greedy answer from every form and loop.

The standard-op form computes attention and RoPE with plain ONNX ops, the GQA form inside
com.microsoft.GroupQueryAttention: agreement checks both implementations against each other.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.convert.default_model import bundled_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.modes import MODES
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message

pytestmark = [pytest.mark.default_model, pytest.mark.usefixtures("exact_default_precision")]
SETTINGS = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=40)
QUESTION = [Message("user", "Name three primary colors.")]


@pytest.fixture(scope="module")
def other_forms(
    default_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("default-layouts")
    gguf = bundled_gguf()
    return {
        "standard": convert_gguf(gguf, root / "standard", ConvertOptions(attention="standard")),
        "static": convert_gguf(
            gguf,
            root / "static",
            ConvertOptions(kv_layout="static", attention="standard", context_length=256),
        ),
    }


def answer(folder: Path, mode: str) -> list[int]:
    engine = Engine(folder, mode=mode, max_context=256)
    return engine.chat(QUESTION, SETTINGS).run().token_ids


def test_all_forms_and_loops_agree(default_model_dir: Path, other_forms: dict[str, Path]) -> None:
    reference = answer(default_model_dir, "iobinding")
    assert len(reference) > 5
    assert answer(default_model_dir, "naive") == reference
    assert answer(default_model_dir, "nocache") == reference
    for name, folder in other_forms.items():
        for mode in MODES:
            assert answer(folder, mode) == reference, (name, mode)
