"""A token's exact bytes for log-probs: byte-level pieces, split characters, specials."""

from __future__ import annotations

from pathlib import Path

from chatapp.engine.text.chat import ChatTokenizer
from chatapp.server.token_text import TokenText, byte_decoder


def test_the_byte_table_covers_every_byte_once() -> None:
    assert sorted(byte_decoder().values()) == list(range(256))
    assert byte_decoder()["Ġ"] == 0x20 and byte_decoder()["A"] == 0x41


def test_tokens_of_a_split_character_give_its_bytes(tiny_model_dir: Path) -> None:
    tokenizer = ChatTokenizer.from_folder(tiny_model_dir)
    text = TokenText(tokenizer.tok)
    assert text.byte_level
    ids = tokenizer.encode("é😀 the")
    pieces = [text(i) for i in ids]
    assert b"".join(raw for _, raw in pieces) == "é😀 the".encode()
    partial = [token for token, raw in pieces if len(raw) == 1 and raw[0] >= 0x80]
    assert partial and all(t.startswith("\\x") for t in partial)  # half a character, escaped


def test_special_tokens_keep_their_name(tiny_model_dir: Path) -> None:
    tokenizer = ChatTokenizer.from_folder(tiny_model_dir)
    (end,) = tokenizer.encode("<|im_end|>")
    assert TokenText(tokenizer.tok)(end) == ("<|im_end|>", b"<|im_end|>")
