"""A model folder's `tokenizer.json` loaded with `tokenizers` alone, without transformers.

transformers' `AutoTokenizer` wraps the same `tokenizers.Tokenizer`, and for a folder whose
tokenizer_config.json has no `added_tokens_decoder` (every folder the converter writes) it also
parses the whole tokenizer.json in Python to read its added tokens. On Gemma 3's 262k-token
tokenizer.json (33 MB) that took the load's peak from 424 to 627 MiB for nothing kept; the
tokenizer itself keeps about 95 MiB (docs/engine.md, "The tokenizer's memory").

Only folders whose tokenizer transformers would load as the generic fast tokenizer are taken
(tokenizer_class `PreTrainedTokenizerFast` or `TokenizersBackend`: what the converter, Optimum and
onnxruntime-genai's builder write), or as `Qwen2Tokenizer` (Qwen 2/2.5/3's own folders: 152k
tokens), whose pipeline around tokenizer.json's vocabulary and merges is rebuilt here as
transformers 5 rebuilds it, and only when every special token the config names is
already an added token of tokenizer.json, so that nothing transformers would add or rebuild is
missing; `load` returns None for any other folder, and `load_tokenizer` (the one way a
folder's tokenizer is loaded) uses transformers. The ids are
the same as transformers' (tests/engine/test_folder_tokenizer.py compares them on every fixture
folder and converted family).

The object answers the part of transformers' tokenizer API that chatapp uses (`encode`, `decode`,
`special_tokens_map`, `added_tokens_decoder`, ...), so ControlTokens, TokenText and the
constraint compiler take either.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.files import TokenizerFiles
from chatapp.engine.text.tokenizer_pieces import LONG_TEXT, QWEN2_SPLIT, TextPieces
from chatapp.error_text import first_line

GENERIC_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})
# Classes whose transformers __init__ builds its own pipeline around tokenizer.json's BPE.
QWEN2_CLASSES = frozenset({"Qwen2Tokenizer", "Qwen2TokenizerFast"})
# transformers 5's Qwen2Tokenizer: the special tokens it defaults to (its split: QWEN2_SPLIT).
_QWEN2_DEFAULTS = {
    "unk_token": "<|endoftext|>",
    "eos_token": "<|endoftext|>",
    "pad_token": "<|endoftext|>",
}
# Set beside HF_HUB_OFFLINE when chatapp set it, not the user.
HUB_OFFLINE_SET_BY_CHATAPP = "CHATAPP_HF_HUB_OFFLINE_SET"
# transformers' named special tokens; a config's other `*_token` keys are special tokens too.
NAMED_SPECIAL = frozenset(
    {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}
)


def load_tokenizer(files: TokenizerFiles) -> Any:
    """The folder's tokenizer from its files as read and checked once: `tokenizers` alone
    where that gives transformers' ids (`FolderTokenizer.load`), else transformers' (local
    files only, no remote code); ModelError says why it cannot be loaded."""
    # Never reach a model hub: the folder is all there is. Marked as chatapp's, so that
    # the hub's requests the user asks for (chatapp/hub) tell it from the user's own.
    if "HF_HUB_OFFLINE" not in os.environ:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ[HUB_OFFLINE_SET_BY_CHATAPP] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        found = FolderTokenizer.load(files)
        if found is not None:
            return found
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            str(files.folder), local_files_only=True, trust_remote_code=False
        )
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(
            f"The tokenizer in {files.folder.name} could not be loaded ({first_line(exc)})."
        ) from exc


class _SharedLock:
    """Many encodes at once, or one that switches special tokens off (a setting of the shared
    tokenizer) alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._readers:
                self._cond.wait()
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def _content(value: Any) -> str | None:
    """A special token's text: a string, or a serialized AddedToken ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _special_tokens(
    config: Mapping[str, Any], stored: Mapping[str, Any], defaults: Mapping[str, str]
) -> dict[str, str] | None:
    """bos_token, eos_token, ... as transformers 5 reads them (special_tokens_map.json counts
    only when the config has no added_tokens_decoder); None for a value it would not take.
    `defaults` are the class's own, for the keys the config does not name (null included)."""
    # A config's own `*_token` keys count when their value is text (a serialized token there
    # stays a plain setting); special_tokens_map.json is read after that, for the named ones.
    values: dict[str, Any] = {k: v for k, v in defaults.items() if k not in config}
    values.update(
        (key, value)
        for key, value in config.items()
        if value is not None
        and (key in NAMED_SPECIAL or (key.endswith("_token") and isinstance(value, str)))
    )
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):  # named extra tokens are special tokens by those names
        values.update(extra)
    for key, value in stored.items():
        if key in NAMED_SPECIAL and value is not None:
            values[key] = value
    out: dict[str, str] = {}
    for key, value in values.items():
        text = _content(value)
        if text is None:
            return None
        out[key] = text
    return out


def _extra_special(config: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str] | None:
    extra = config.get("extra_special_tokens") or config.get("additional_special_tokens") or []
    if stored:
        extra = [*extra, *(stored.get("additional_special_tokens") or [])]
    if isinstance(extra, dict):
        extra = list(extra.values())
    texts = [_content(v) for v in extra] if isinstance(extra, list) else [None]
    return None if any(t is None for t in texts) else [t for t in texts if t is not None]


def _chat_template(files: TokenizerFiles, config: Mapping[str, Any]) -> str | dict[str, str] | None:
    """chat_template.jinja beside the config first, as transformers reads it."""
    if files.chat_template is not None:
        return files.chat_template
    value = config.get("chat_template")
    if isinstance(value, list):  # [{"name": ..., "template": ...}, ...]
        return {
            str(t["name"]): str(t["template"])
            for t in value
            if isinstance(t, dict) and "name" in t and "template" in t
        }
    return value if isinstance(value, str) else None


def _qwen2_pipeline(backend: Tokenizer, config: Mapping[str, Any]) -> bool:
    """Give `backend` the normalizer, pre-tokenizer and decoder transformers 5's Qwen2Tokenizer
    builds around tokenizer.json's vocabulary and merges; False (nothing changed) when
    tokenizer.json's BPE settings differ from the ones it builds (its ids would differ)."""
    model = backend.model
    if not isinstance(model, BPE):
        return False
    settings = (
        model.dropout,
        model.unk_token,
        model.continuing_subword_prefix or "",
        model.end_of_word_suffix or "",
        model.fuse_unk,
        model.byte_fallback,
        model.ignore_merges,
    )
    if settings != (None, None, "", "", False, False, False):
        return False
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(
                add_prefix_space=bool(config.get("add_prefix_space")), use_regex=False
            ),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    return True


class FolderTokenizer:
    """tokenizer.json with the settings transformers would read beside it."""

    def __init__(
        self,
        backend: Tokenizer,
        special: Mapping[str, str],
        chat_template: str | dict[str, str] | None,
        clean_up_spaces: bool,
    ) -> None:
        backend.no_truncation()  # transformers' encode() without truncation= or padding=
        backend.no_padding()
        backend.encode_special_tokens = False
        self.backend_tokenizer = backend
        self.special_tokens_map = dict(special)
        self.chat_template = chat_template
        self.added_tokens_decoder: dict[int, AddedToken] = backend.get_added_tokens_decoder()
        self.all_special_ids = sorted(
            {i for i, t in self.added_tokens_decoder.items() if t.special}
            | {i for t in special.values() if (i := backend.token_to_id(t)) is not None}
        )
        self.bos_token_id = self._id("bos_token")
        self.eos_token_id = self._id("eos_token")
        # transformers skips its clean-up for BPE models (it strips spaces before punctuation).
        self._clean_up = clean_up_spaces and type(backend.model).__name__ != "BPE"
        self._lock = _SharedLock()
        self._pieces = TextPieces.for_tokenizer(backend, self.added_tokens_decoder.values())

    @staticmethod
    def load(files: TokenizerFiles) -> FolderTokenizer | None:
        """The folder's tokenizer from its files as read and checked once, or None when
        transformers must load it (see the module)."""
        path, config = files.tokenizer_json, files.config
        if path is None or config is None:
            return None
        qwen2 = config.get("tokenizer_class") in QWEN2_CLASSES
        if not qwen2 and config.get("tokenizer_class") not in GENERIC_CLASSES:
            return None
        if files.other_sources:
            return None
        stored = files.special_tokens_map or {}
        special = _special_tokens(config, stored, _QWEN2_DEFAULTS if qwen2 else {})
        extra = _extra_special(config, stored)
        if special is None or extra is None:
            return None
        backend = Tokenizer.from_file(str(path))
        if qwen2 and not _qwen2_pipeline(backend, config):
            return None
        added = {
            str(t.content): (i, t.special) for i, t in backend.get_added_tokens_decoder().items()
        }
        if any(text not in added for text in [*special.values(), *extra]):
            return None  # transformers would add it as a new token
        for index, token in (config.get("added_tokens_decoder") or {}).items():
            if not isinstance(token, dict) or added.get(str(token.get("content"))) != (
                int(index),
                bool(token.get("special", False)),
            ):
                return None
        clean = bool(config.get("clean_up_tokenization_spaces", False))
        return FolderTokenizer(backend, special, _chat_template(files, config), clean)

    def _id(self, key: str) -> int | None:
        text = self.special_tokens_map.get(key)
        return None if text is None else self.backend_tokenizer.token_to_id(text)

    def encode(
        self, text: str, add_special_tokens: bool = True, split_special_tokens: bool = False
    ) -> list[int]:
        """Ids of `text`; with `split_special_tokens` a control token's string is plain text.
        That switches a setting of the one shared tokenizer, so it waits for other encodes
        and they for it (no second copy of the tokenizer, which cost as much as the first)."""
        backend = self.backend_tokenizer
        if not split_special_tokens:
            with self._lock.shared():
                return self._ids(text, add_special_tokens)
        with self._lock.exclusive():
            backend.encode_special_tokens = True
            try:
                return self._ids(text, add_special_tokens)
            finally:
                backend.encode_special_tokens = False

    def _ids(self, text: str, add_special_tokens: bool) -> list[int]:
        """A text up to LONG_TEXT characters: encode, on this thread, as always. A longer one
        (a paste) in pieces where the pipeline allows (engine/text/tokenizer_pieces.py), with
        encode_batch_fast: encode's ids without the character offsets nothing here reads (a
        table of every character: a fifth of a 1 MB paste's instructions), on tokenizers'
        worker threads, each with a heap of its own (docs/engine.md, "A long paste").
        Special tokens a post-processor adds around a text ask for it whole."""
        backend = self.backend_tokenizer
        if len(text) <= LONG_TEXT:
            return list(backend.encode(text, add_special_tokens=add_special_tokens).ids)
        pieces = [text]
        if self._pieces is not None and not add_special_tokens:
            pieces = self._pieces.cut(text)
        # tokenizers before 0.20 has no encode_batch_fast: the same ids with the offsets.
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        encodings = encode(pieces, add_special_tokens=add_special_tokens)
        return [i for encoding in encodings for i in encoding.ids]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        text = str(
            self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)
        )
        return _clean_up_tokenization(text) if self._clean_up else text

    def convert_ids_to_tokens(self, token_id: int) -> str | None:
        return self.backend_tokenizer.id_to_token(int(token_id))

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> int | list[int | None] | None:
        """Ids of vocabulary entries; one that is not there: the unknown token's (or None)."""
        if isinstance(tokens, str):
            return self._token_id(tokens)
        return [self._token_id(t) for t in tokens]

    def _token_id(self, token: str) -> int | None:
        found = self.backend_tokenizer.token_to_id(token)
        return self._id("unk_token") if found is None else found

    def get_vocab(self) -> dict[str, int]:
        return dict(self.backend_tokenizer.get_vocab(with_added_tokens=True))

    def __len__(self) -> int:
        return int(self.backend_tokenizer.get_vocab_size(with_added_tokens=True))


def _clean_up_tokenization(text: str) -> str:
    """transformers' `clean_up_tokenization` (WordPiece-era spacing before punctuation)."""
    for before, after in (
        (" .", "."),
        (" ?", "?"),
        (" !", "!"),
        (" ,", ","),
        (" ' ", "'"),
        (" n't", "n't"),
        (" 'm", "'m"),
        (" 's", "'s"),
        (" 've", "'ve"),
        (" 're", "'re"),
    ):
        text = text.replace(before, after)
    return text
