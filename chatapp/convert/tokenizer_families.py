"""What llama.cpp decides about a GGUF vocabulary from token texts and the model's name.

Some behaviour is in no metadata key: llama.cpp recognises end-of-turn tokens by their text, and
gives Phi-3's special tokens an "rstrip" attribute (whitespace after them is dropped) when the
file's general.name says Phi-3. Matching its token ids means applying the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Texts llama.cpp treats as end of generation; it makes them control tokens (matched whole, and
# only as special tokens) whatever type the file gives them, "</s>" included.
END_OF_TURN_TEXTS = (
    "<|eot_id|>",  # Llama 3
    "<|eom_id|>",  # Llama 3.1 tool calls
    "<|im_end|>",  # ChatML: Qwen, SmolLM
    "<|end|>",  # Phi-3
    "<end_of_turn>",  # Gemma
    "<|endoftext|>",
    "<|end_of_text|>",
    "</s>",
    "<eos>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<end_of_utterance>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<turn|>",
    "<|tool_response>",
)

# Phi-3 files: every special token strips the whitespace after it, except these.
_PHI3_NAMES = ("phi-3", "phi3")
_PHI3_KEEPS_WHITESPACE = ("<unk>", "<s>", "<|endoftext|>")
_PHI3_ALSO_STRIPS = ("</s>",)


def strips_after_special_tokens(meta: Mapping[str, Any]) -> bool:
    """llama.cpp's rule, keyed on the lower-cased general.name as it is."""
    name = str(meta.get("general.name") or "").lower()
    return any(key in name for key in _PHI3_NAMES)


def rstrip(token: str, special_cache: bool) -> bool:
    """Under the Phi-3 rule: does whitespace after `token` go? (special_cache: control,
    user-defined or unknown type, the tokens llama.cpp matches whole in text)."""
    if token in _PHI3_KEEPS_WHITESPACE:
        return False
    return special_cache or token in _PHI3_ALSO_STRIPS
