"""How llama.cpp splits text before byte-level BPE, per ``tokenizer.ggml.pre`` value: the split
patterns and the table of names chatapp rebuilds (tokenizer.py builds the tokenizer from them)."""

from __future__ import annotations

from dataclasses import dataclass

# Pre-tokenizer split patterns, as llama.cpp applies them (llama-vocab.cpp) and as the models'
# own tokenizer.json files spell them. GPT-2's pattern is the one ByteLevel(use_regex=True) has
# built in, so it needs no entry of its own.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2 is Llama 3's pattern with single digits.
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# GPT-4o's (o200k) split and Mistral's Tekken, as llama.cpp runs them: a word is letters that are
# not a-z then letters that are not A-Z (or the reverse), so "CamelCase" is two words. llama.cpp's
# classes are narrower than tiktoken's (combining marks are not letters there, any letter outside
# ASCII counts as both cases) and change Devanagari's words; llama.cpp's ids are the ones to match.
# Lookaheads rather than class intersection ([\p{L}&&[^a-z]]), which only some regex engines know:
# the written tokenizer.json stays readable by other tokenizers libraries.
_UPPERISH = r"(?:(?=\p{L})[^a-z])"
_LOWERISH = r"(?:(?=\p{L})[^A-Z])"
_CONTRACTION = r"(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?"


def _cased_words_split(contraction: str, digits: str) -> str:
    word = r"[^\r\n\p{L}\p{N}]?"
    return (
        f"{word}{_UPPERISH}*{_LOWERISH}+{contraction}|{word}{_UPPERISH}+{_LOWERISH}*{contraction}"
        rf"|{digits}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )


_GPT4O_SPLIT = _cased_words_split(_CONTRACTION, r"\p{N}{1,3}")
_TEKKEN_SPLIT = _cased_words_split("", r"\p{N}")


@dataclass(frozen=True)
class BytePre:
    """How one ``tokenizer.ggml.pre`` value splits text before byte-level BPE."""

    split: str | None  # a regex applied before the byte mapping; None = GPT-2's own pattern
    digits_alone: bool = False  # every digit its own piece first (StarCoder's family)
    ignore_merges: bool = False  # a piece that is already a token is taken whole (Llama 3)
    add_bos: bool = False  # llama.cpp's default when the file has no add_bos_token key


_GPT2_PRE = BytePre(split=None)
_STARCODER_PRE = BytePre(split=None, digits_alone=True)
_LLAMA3_PRE = BytePre(split=_LLAMA3_SPLIT, ignore_merges=True, add_bos=True)
_QWEN2_PRE = BytePre(split=_QWEN2_SPLIT)
_GPT4O_PRE = BytePre(split=_GPT4O_SPLIT)
_TEKKEN_PRE = BytePre(split=_TEKKEN_SPLIT, ignore_merges=True, add_bos=True)
_LLAMA3_MERGING_PRE = BytePre(split=_LLAMA3_SPLIT)  # Llama 3's split, merges always applied

# Only names whose llama.cpp handling (split, ignore_merges, add_bos default) is one of the shapes
# above; each was checked against llama.cpp's ids (docs/converter.md).
BYTE_LEVEL_PRE: dict[str, BytePre] = {
    # llama.cpp's own "default" is a legacy pattern it warns degrades quality; the files that say
    # it (or nothing) came from GPT-2-style tokenizers, so GPT-2's split is the honest choice.
    "default": _GPT2_PRE,
    "gpt-2": _GPT2_PRE,
    "phi-2": _GPT2_PRE,
    "mpt": _GPT2_PRE,
    "olmo": _GPT2_PRE,
    "jais": _GPT2_PRE,
    "exaone4": _GPT2_PRE,
    "smollm": _STARCODER_PRE,
    "starcoder": _STARCODER_PRE,
    "refact": _STARCODER_PRE,
    "codeshell": _STARCODER_PRE,
    "command-r": _STARCODER_PRE,
    "exaone": _STARCODER_PRE,
    "llama-bpe": _LLAMA3_PRE,
    "llama3": _LLAMA3_PRE,
    "llama-v3": _LLAMA3_PRE,
    "falcon3": _LLAMA3_PRE,
    "pixtral": _LLAMA3_PRE,
    "dbrx": _LLAMA3_MERGING_PRE,
    "smaug-bpe": _LLAMA3_MERGING_PRE,
    "qwen2": _QWEN2_PRE,
    "deepseek-r1-qwen": _QWEN2_PRE,  # DeepSeek-R1's Qwen distills
    "stablelm2": _QWEN2_PRE,
    "megrez": _QWEN2_PRE,
    "gpt-4o": _GPT4O_PRE,  # Phi-4-mini
    "llama4": _GPT4O_PRE,
    "tekken": _TEKKEN_PRE,  # Mistral Nemo, Mistral Small 3
}
