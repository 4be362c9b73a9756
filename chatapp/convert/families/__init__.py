"""The decoder families the converter builds, by llama.cpp architecture name."""

from __future__ import annotations

from chatapp.convert.architectures import SUPPORTED_ARCHITECTURES, unsupported_message
from chatapp.convert.errors import ConversionError
from chatapp.convert.families.base import Family, ModelWeights
from chatapp.convert.families.gemma import Gemma2, Gemma3
from chatapp.convert.families.llama import Llama
from chatapp.convert.families.phi3 import Phi3
from chatapp.convert.families.qwen import Qwen2, Qwen3
from chatapp.convert.gguf_file import GGUFModel

FAMILIES: dict[str, Family] = {
    f.arch: f for f in (Llama(), Qwen2(), Qwen3(), Gemma2(), Gemma3(), Phi3())
}
assert tuple(FAMILIES) == SUPPORTED_ARCHITECTURES


def family_of(model: GGUFModel) -> Family:
    """The model's family, after checking its tensors are exactly the ones it uses."""
    arch = model.spec.architecture
    family = FAMILIES.get(arch)
    if family is None:
        raise ConversionError(unsupported_message(model.path.name, arch))
    family.check(model)
    return family


__all__ = ["FAMILIES", "Family", "ModelWeights", "family_of"]
