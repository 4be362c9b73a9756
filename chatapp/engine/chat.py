"""Chat template, tokenizer and an incremental detokenizer."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatapp.engine.errors import ModelError

# Used when a model folder has no chat template of its own.
FALLBACK_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


class ChatTokenizer:
    """The folder's tokenizer (transformers, local files only) with its chat template."""

    def __init__(self, folder: Path) -> None:
        # Never reach a model hub: the folder is all there is.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers import AutoTokenizer

        try:
            self.tok: Any = AutoTokenizer.from_pretrained(
                str(folder), local_files_only=True, trust_remote_code=False
            )
        except Exception as exc:
            raise ModelError(
                f"The tokenizer in {folder.name} could not be loaded ({exc})."
            ) from exc
        self.has_template = bool(getattr(self.tok, "chat_template", None))

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tok.decode(list(ids), skip_special_tokens=True))

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        dicts = [m.as_dict() for m in messages]
        template = None if self.has_template else FALLBACK_TEMPLATE
        try:
            text = self.tok.apply_chat_template(
                dicts,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
                chat_template=template,
            )
        except Exception as exc:  # a template may reject e.g. a system role
            raise ModelError(f"The model's chat template failed: {exc}") from exc
        return str(text)

    def chat_ids(self, messages: Sequence[Message]) -> list[int]:
        """Prompt ids: the template's text already holds the special tokens it wants."""
        return self.encode(self.render(messages))


class IncrementalDetokenizer:
    """Turns a token stream into text deltas, never emitting half a UTF-8 character.

    Decodes a short window (from a few tokens back) so that tokenizers which merge spaces or
    bytes across token boundaries still produce the right text.
    """

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # start of the decode window
        self._read = 0  # tokens whose text has been emitted

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self.tokenizer.decode(self.ids[self._prefix : self._read])
        after = self.tokenizer.decode(self.ids[self._prefix :])
        if after.endswith("\ufffd") or len(after) <= len(before):
            return ""  # an incomplete character (or nothing visible yet): wait for more
        self._prefix, self._read = self._read, len(self.ids)
        return after[len(before) :]

    def flush(self) -> str:
        """Whatever is left at the end (e.g. a dangling incomplete byte sequence)."""
        before = self.tokenizer.decode(self.ids[self._prefix : self._read])
        after = self.tokenizer.decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return after[len(before) :] if after.startswith(before) else ""

    @property
    def text(self) -> str:
        return self.tokenizer.decode(self.ids)
