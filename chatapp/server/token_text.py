"""A token's exact bytes and its text for API log-probs (OpenAI's `token` and `bytes`).

Decoding one token alone gives U+FFFD for half a character (an emoji split over two tokens)
and drops a SentencePiece word's leading space, so the bytes come from the vocabulary entry
where its encoding is known: byte-level BPE (GPT-2's byte alphabet) and byte fallback
(`<0xE2>`). Text that is not valid UTF-8 on its own is shown with \\x escapes.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_METASPACE = "\u2581"  # SentencePiece's word-start mark


@cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte, reversed (a fixed public mapping)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars: dict[str, int] = {}
    extra = 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


class TokenText:
    def __init__(self, hf_tokenizer: Any) -> None:
        self.tok = hf_tokenizer
        backend = getattr(hf_tokenizer, "backend_tokenizer", None)
        decoder = getattr(backend, "decoder", None)
        self.byte_level = type(decoder).__name__ == "ByteLevel"
        self._cache: dict[int, tuple[str, bytes]] = {}

    def __call__(self, token_id: int) -> tuple[str, bytes]:
        found = self._cache.get(token_id)
        if found is None:
            raw = self._bytes(token_id)
            found = (raw.decode("utf-8", errors="backslashreplace"), raw)
            if len(self._cache) < 200_000:
                self._cache[token_id] = found
        return found

    def _bytes(self, token_id: int) -> bytes:
        piece = self.tok.convert_ids_to_tokens(token_id)
        if not isinstance(piece, str):
            return b""
        if token_id in getattr(self.tok, "all_special_ids", ()):
            return piece.encode("utf-8")
        table = byte_decoder()
        if self.byte_level and all(c in table for c in piece):
            return bytes(table[c] for c in piece)
        match = _BYTE_TOKEN.fullmatch(piece)
        if match:
            return bytes([int(match.group(1), 16)])
        if _METASPACE in piece:
            return piece.replace(_METASPACE, " ").encode("utf-8")
        return str(self.tok.decode([token_id])).encode("utf-8")
