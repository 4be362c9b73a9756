"""Keeping control tokens typed into messages as text.

A tokenizer turns the string `<|im_end|>` into the control token wherever it appears, so text
that contains it could end a turn and start a forged one. The chat template is rendered with
each control-token string in the *messages* wrapped in two Unicode noncharacters (U+FDD0 and
U+FDD1, reserved for exactly this kind of internal use and stripped from the messages first);
the rendered text is then cut at the markers. The pieces between markers are encoded normally,
so the template's own control tokens stay tokens, and each wrapped string is encoded with the
special tokens switched off: it becomes the ordinary tokens of its characters. A marker that a
template string method tore from its partner is dropped but still cuts the text, so the two
sides can never join into a control token.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from chatapp.engine.errors import ModelError
from chatapp.engine.text.folder_tokenizer import FolderTokenizer

START, END = "\ufdd0", "\ufdd1"

# Where an image or a sound goes in a multimodal family's prompt. Gemma 3's GGUFs mark them
# user-defined, so they decode as text, but a converted model never sees media: none is
# sampled (a marker promises an image that never comes; Gemma 3 270M ranks <start_of_image>
# high after text), and one in text to decode is hidden, as transformers' tokenizers (which
# mark them special) hide it.
MEDIA_MARKERS = frozenset(
    {
        "<start_of_image>",
        "<end_of_image>",
        "<image_soft_token>",
        "<start_of_audio>",
        "<end_of_audio>",
        "<audio_soft_token>",
    }
)
_MARKED = re.compile(f"{START}([^{START}{END}]*){END}|[{START}{END}]")


class ControlTokens:
    """The control tokens of one tokenizer and the encodings that keep them out of text."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        added = getattr(tok, "added_tokens_decoder", {}) or {}
        # Special added tokens are the ones a tokenizer parses out of text; whitespace ones
        # (Gemma's "\n") are ordinary text in every template.
        strings = {
            str(t.content): int(i)
            for i, t in added.items()
            if getattr(t, "special", False) and str(t.content).strip()
        }
        self.ids = frozenset(strings.values())
        self.media_ids = frozenset(
            int(i) for i, t in added.items() if str(t.content) in MEDIA_MARKERS
        )
        ordered = sorted(strings, key=len, reverse=True)  # a token before the tokens inside it
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None
        self._plain: Any = None  # a backend tokenizer with special tokens switched off
        self._lock = threading.Lock()

    def found_in(self, text: str) -> bool:
        return self._pattern is not None and self._pattern.search(text) is not None

    def mark(self, text: str) -> str:
        text = text.replace(START, "").replace(END, "")
        if self._pattern is None:
            return text
        return self._pattern.sub(lambda m: f"{START}{m.group(0)}{END}", text)

    def encode_marked(self, rendered: str) -> list[int]:
        # re.split with one group: [text, token-or-None, text, token-or-None, ..., text]
        parts = _MARKED.split(rendered)
        ids = self._encode(parts[0], as_text=False, first=True)
        for i, part in enumerate(parts[1:], start=1):
            if part:
                ids += self._encode(part, as_text=i % 2 == 1, first=False)
        return ids

    def encode_as_text(self, text: str) -> list[int]:
        return self._encode(text, as_text=True, first=True) if text else []

    def _encode(self, text: str, as_text: bool, first: bool) -> list[int]:
        encode = self._encode_plain if as_text else self._encode_normal
        if first:
            ids = encode(text)
        else:
            # After a newline, so a SentencePiece tokenizer adds no word-start space to the
            # middle of a text; the newline's own ids are removed again.
            newline = encode("\n")
            ids = encode("\n" + text)
            ids = ids[len(newline) :] if ids[: len(newline)] == newline else encode(text)
        if as_text and self.ids.intersection(ids):
            # The vocabulary can build the control token from plain text: spell it out.
            ids = [i for ch in text for i in encode(ch)]
            if self.ids.intersection(ids):
                raise ModelError(f"The tokenizer cannot encode {text[:40]!r} as text.")
        return ids

    def _encode_normal(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def _encode_plain(self, text: str) -> list[int]:
        if isinstance(self.tok, FolderTokenizer):  # switches special tokens off itself
            return self.tok.encode(text, add_special_tokens=False, split_special_tokens=True)
        plain = self._plain_tokenizer()
        if plain is None:
            with self._lock:  # the slow path toggles the shared tokenizer's setting
                return list(
                    self.tok.encode(text, add_special_tokens=False, split_special_tokens=True)
                )
        return list(plain.encode(text, add_special_tokens=False).ids)

    def _plain_tokenizer(self) -> Any:
        """A copy of transformers' fast tokenizer with special tokens off, so no shared setting
        is flipped while another thread encodes (a FolderTokenizer needs no copy)."""
        if self._plain is None:
            backend = getattr(self.tok, "backend_tokenizer", None)
            if backend is None:
                return None
            from tokenizers import Tokenizer

            with self._lock:
                if self._plain is None:
                    plain = Tokenizer.from_str(backend.to_str())
                    plain.encode_special_tokens = True
                    self._plain = plain
        return self._plain
