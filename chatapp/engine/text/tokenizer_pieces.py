"""A long text cut into pieces that tokenize to the same ids one by one as the whole text does.

Encoding a 1 MB paste in one call makes `tokenizers` build per-byte tables of the whole text
(alignments, normalization, pre-tokens): about 130 MiB that a lean process has to fault in fresh
and that outgrow the CPU caches (docs/engine.md, "A long paste"). Pieces of a few ten thousand
characters keep that work small, and their ids, one piece after another, are the whole text's.

A piece may end only where the tokenizer's own pipeline splits the text whatever comes before or
after, so a cut is only taken for pipelines whose every step is known here:

- a regex pre-tokenizer (Qwen 2's and Llama 3's split, GPT-2's built into ByteLevel, with
  single digits or not): no pre-token holds a letter followed by a space or a newline (the
  letter run ends there, the optional character before a word is never a letter), and no split
  looks behind; a cut goes between such a letter and the space or newline;
- no pre-tokenizer, with the newline an added token of its own (Gemma): every newline run is
  cut out of the text before anything else; a cut goes in front of a newline run;

with a normalizer that changes one character at a time (none, NFC/NFD/NFKC/NFKD, a Replace of one
character) and no added token that could match across a cut (one holding such a letter and
space, with lstrip, rstrip or single_word). Any other tokenizer encodes the whole text at once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from tokenizers import AddedToken, Tokenizer

# Pieces are about this many characters long; a text up to LONG_TEXT is encoded whole.
PIECE_CHARS = 16_384
LONG_TEXT = 2 * PIECE_CHARS

# Split patterns whose pre-tokens never hold a letter followed by whitespace (see the module).
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
LLAMA3_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
_KNOWN_SPLITS = frozenset({QWEN2_SPLIT, LLAMA3_SPLIT})
_ONE_CHAR_NORMALIZERS = frozenset({"NFC", "NFD", "NFKC", "NFKD"})

# A letter (verified with str.isalpha, the same Unicode category as \p{L}) before a space or a
# newline: the cut goes after the letter.
_WORD_END = re.compile(r"[^\W\d_](?=[ \n])")
# The last character before a newline run: the cut goes after it.
_LINE_END = re.compile(r"[^\n](?=\n)")


def _state(component: Any) -> dict[str, Any] | None:
    """A normalizer's or pre-tokenizer's settings, as tokenizer.json spells them."""
    if component is None:
        return None
    state = json.loads(component.__getstate__())
    return state if isinstance(state, dict) else {}


def _steps(state: dict[str, Any] | None, key: str) -> list[dict[str, Any]]:
    if state is None:
        return []
    if state.get("type") == "Sequence":
        return [s for step in state.get(key) or [] for s in _steps(step, key)]
    return [state]


def _one_char_at_a_time(normalizer: dict[str, Any] | None) -> bool:
    for step in _steps(normalizer, "normalizers"):
        kind = step.get("type")
        if kind == "Replace":
            pattern = step.get("pattern") or {}
            if len(str(pattern.get("String", ""))) != 1:
                return False  # a regex or a longer string may match across a cut
        elif kind not in _ONE_CHAR_NORMALIZERS:
            return False
    return True


def _splits_at_word_ends(pre_tokenizer: dict[str, Any] | None) -> bool:
    """Every step is one the module knows, and one of them splits words off whitespace."""
    splits = False
    for step in _steps(pre_tokenizer, "pretokenizers"):
        kind = step.get("type")
        if kind == "ByteLevel":
            if step.get("add_prefix_space"):
                return False
            splits = splits or bool(step.get("use_regex"))
        elif kind == "Split":
            pattern = step.get("pattern") or {}
            if (
                pattern.get("Regex") not in _KNOWN_SPLITS
                or str(step.get("behavior")).lower() != "isolated"
                or step.get("invert")
            ):
                return False
            splits = True
        elif kind != "Digits":
            return False
    return splits


class TextPieces:
    """Where one tokenizer's text may be cut (`for_tokenizer` decides whether anywhere)."""

    def __init__(self, boundary: re.Pattern[str], letters_only: bool, size: int) -> None:
        self._boundary = boundary
        self._letters_only = letters_only
        self.size = size

    @staticmethod
    def for_tokenizer(
        backend: Tokenizer, added: Iterable[AddedToken], size: int = PIECE_CHARS
    ) -> TextPieces | None:
        tokens = list(added)
        if any(t.lstrip or t.rstrip or t.single_word for t in tokens):
            return None
        if not _one_char_at_a_time(_state(backend.normalizer)):
            return None
        contents = [str(t.content) for t in tokens]
        pre_tokenizer = _state(backend.pre_tokenizer)
        if _splits_at_word_ends(pre_tokenizer):
            if any(_WORD_END.search(c) for c in contents):
                return None
            return TextPieces(_WORD_END, letters_only=True, size=size)
        newline = any(str(t.content) == "\n" and not t.special for t in tokens)
        if pre_tokenizer is None and newline and not any(_LINE_END.search(c) for c in contents):
            return TextPieces(_LINE_END, letters_only=False, size=size)
        return None

    def cut(self, text: str) -> list[str]:
        """`text` in pieces of `size` characters or a little more (the next boundary after
        that many), the rest in the last one; one piece where there is no boundary."""
        pieces: list[str] = []
        start = 0
        while len(text) - start > 2 * self.size:
            found = self._boundary.search(text, start + self.size)
            while found is not None and self._letters_only and not found.group().isalpha():
                found = self._boundary.search(text, found.end())
            if found is None:
                break
            pieces.append(text[start : found.end()])
            start = found.end()
        pieces.append(text[start:])
        return pieces
