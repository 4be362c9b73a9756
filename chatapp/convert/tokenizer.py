"""The tokenizer of a GGUF file, rebuilt as Hugging Face tokenizer files, without torch.

A GGUF file carries no ``tokenizer.json``: llama.cpp stores the vocabulary, the merges or scores,
the token types and the special token ids as metadata. This module reads that metadata (a plain
``dict`` of key -> value, as ``gguf.GGUFReader(path).fields[key].contents()`` gives) and builds a
``tokenizers.Tokenizer`` that splits text the way llama.cpp does for the same file, then wraps it in
``transformers.PreTrainedTokenizerFast`` and writes ``tokenizer.json``, ``tokenizer_config.json``
and ``special_tokens_map.json``.

transformers' own GGUF route (``AutoTokenizer.from_pretrained(..., gguf_file=...)``) imports torch
to read the file, and has no entry for some pre-tokenizers (SmolLM's ``smollm`` among them), so the
pieces are put together here with the ``tokenizers`` library directly.

Supported:

* ``tokenizer.ggml.model == "gpt2"``: byte-level BPE with the merges from the file, and one of the
  pre-tokenizers in ``pre_tokenizers.BYTE_LEVEL_PRE`` (``tokenizer.ggml.pre``; a missing one means
  ``default``).
* ``tokenizer.ggml.model == "llama"``: SentencePiece-style BPE (Llama 2, Mistral, TinyLlama): merges
  ranked by the token scores, byte fallback to ``<0xXX>`` tokens, ``▁`` for spaces and a ``▁`` in
  front of every run of text when ``tokenizer.ggml.add_space_prefix`` says so (the default).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, processors
from tokenizers import pre_tokenizers as pre
from transformers import PreTrainedTokenizerFast

from chatapp.convert.errors import ConversionError
from chatapp.convert.pre_tokenizers import BYTE_LEVEL_PRE
from chatapp.convert.tokenizer_families import (
    END_OF_TURN_TEXTS,
    rstrip,
    strips_after_special_tokens,
)
from chatapp.safe_delete import write_replacing

__all__ = ["TokenizerConversionError", "tokenizer_from_gguf_metadata", "write_tokenizer_files"]


class TokenizerConversionError(ConversionError, ValueError):
    """The GGUF metadata describes a tokenizer this module cannot rebuild; the message says why."""


# llama.cpp's token types (gguf.TokenType).
_NORMAL, _UNKNOWN, _CONTROL, _USER_DEFINED, _UNUSED, _BYTE = 1, 2, 3, 4, 5, 6

_SPM_SPACE = "\u2581"  # "▁", SentencePiece's stand-in for a space

_SUPPORTED_MODELS = ("gpt2", "llama")


@dataclass(frozen=True)
class _GgufVocab:
    """The tokenizer part of the metadata, checked and typed."""

    model: str
    pre: str
    tokens: list[str]
    token_types: list[int]
    scores: list[float] | None
    merges: list[tuple[str, str]] | None
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None
    context_length: int | None
    rstrip_specials: bool  # llama.cpp's Phi-3 rule (tokenizer_families.py)

    def token(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.tokens[token_id]


def _split_merge(merge: str) -> tuple[str, str] | None:
    # llama.cpp cuts at the first space after the first character, so a left part may itself be a
    # space (SentencePiece vocabularies written with raw spaces); a line without one is skipped.
    cut = merge.find(" ", 1)
    if cut < 0:
        return None
    return merge[:cut], merge[cut + 1 :]


def _optional_id(
    meta: Mapping[str, Any], key: str, n_tokens: int, default: int | None
) -> int | None:
    value = meta.get(key)
    if value is None:
        # llama.cpp's fixed default, when the vocabulary is big enough to have it.
        return default if default is not None and default < n_tokens else None
    token_id = int(value)
    if token_id < 0:  # some converters write -1 for "none"
        return None
    if token_id >= n_tokens:
        raise TokenizerConversionError(
            f"The GGUF file names token {token_id} in {key}, but its vocabulary has only "
            f"{n_tokens} tokens."
        )
    return token_id


def _read_vocab(meta: Mapping[str, Any]) -> _GgufVocab:
    model = meta.get("tokenizer.ggml.model")
    if model is None:
        raise TokenizerConversionError(
            "The GGUF file has no tokenizer (the key tokenizer.ggml.model is missing)."
        )
    model = str(model)
    if model not in _SUPPORTED_MODELS:
        raise TokenizerConversionError(
            f"The GGUF file's tokenizer model {model!r} is not supported "
            f"(supported: {', '.join(repr(m) for m in _SUPPORTED_MODELS)})."
        )

    pre_name = str(meta.get("tokenizer.ggml.pre") or "default")
    if model == "gpt2" and pre_name not in BYTE_LEVEL_PRE:
        raise TokenizerConversionError(
            f"The GGUF file's pre-tokenizer {pre_name!r} (tokenizer model 'gpt2') is not supported "
            f"(supported: {', '.join(repr(p) for p in sorted(BYTE_LEVEL_PRE))})."
        )

    raw_tokens = meta.get("tokenizer.ggml.tokens")
    if not raw_tokens:
        raise TokenizerConversionError(
            "The GGUF file has no token list (the key tokenizer.ggml.tokens is missing or empty)."
        )
    tokens = [str(t) for t in raw_tokens]
    n = len(tokens)

    raw_types = meta.get("tokenizer.ggml.token_type")
    token_types = [int(t) for t in raw_types] if raw_types is not None else [_NORMAL] * n
    if len(token_types) != n:
        raise TokenizerConversionError(
            f"The GGUF file lists {len(token_types)} token types for {n} tokens."
        )

    raw_scores = meta.get("tokenizer.ggml.scores")
    scores = [float(s) for s in raw_scores] if raw_scores is not None else None
    if scores is not None and len(scores) != n:
        raise TokenizerConversionError(f"The GGUF file lists {len(scores)} scores for {n} tokens.")

    raw_merges = meta.get("tokenizer.ggml.merges")
    merges = None
    if raw_merges is not None:
        merges = [pair for pair in (_split_merge(str(m)) for m in raw_merges) if pair is not None]
    if model == "gpt2" and not merges:
        raise TokenizerConversionError(
            "The GGUF file's byte-level BPE tokenizer has no merges (tokenizer.ggml.merges)."
        )
    if model == "llama" and scores is None and not merges:
        raise TokenizerConversionError(
            "The GGUF file's SentencePiece tokenizer has neither scores nor merges, "
            "so the merge order cannot be recovered."
        )

    # llama.cpp's defaults when a key is absent: SentencePiece vocabularies put <unk>, <s>, </s>
    # at 0, 1, 2 and add BOS; byte-level ones have no fixed ids and add BOS only for Llama 3.
    spm = model == "llama"
    default_add_bos = True if spm else BYTE_LEVEL_PRE[pre_name].add_bos
    arch = meta.get("general.architecture")
    context = meta.get(f"{arch}.context_length") if arch is not None else None
    template = meta.get("tokenizer.chat_template")
    return _GgufVocab(
        model=model,
        pre=pre_name,
        tokens=tokens,
        token_types=token_types,
        scores=scores,
        merges=merges,
        bos_id=_optional_id(meta, "tokenizer.ggml.bos_token_id", n, 1 if spm else None),
        eos_id=_optional_id(meta, "tokenizer.ggml.eos_token_id", n, 2 if spm else None),
        unk_id=_optional_id(meta, "tokenizer.ggml.unknown_token_id", n, 0 if spm else None),
        pad_id=_optional_id(meta, "tokenizer.ggml.padding_token_id", n, None),
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", default_add_bos)),
        add_eos=bool(meta.get("tokenizer.ggml.add_eos_token", False)),
        add_space_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", spm)),
        chat_template=str(template) if template else None,
        context_length=int(context) if context is not None else None,
        rstrip_specials=strips_after_special_tokens(meta),
    )


def _vocab_dict(tokens: Sequence[str]) -> dict[str, int]:
    # A string listed twice keeps its first id, as llama.cpp's text-to-token map does.
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return vocab


def _usable_merges(
    merges: Sequence[tuple[str, str]], vocab: Mapping[str, int]
) -> list[tuple[str, str]]:
    # tokenizers refuses a merge whose parts or result are not tokens; llama.cpp would fall back
    # to bytes for such a merge's output, which no real vocabulary relies on, so drop them.
    return [(a, b) for a, b in merges if a in vocab and b in vocab and a + b in vocab]


def _merges_from_scores(vocab: _GgufVocab, token_ids: Mapping[str, int]) -> list[tuple[str, str]]:
    """The merges a SentencePiece BPE vocabulary implies, best first.

    llama.cpp's SentencePiece tokenizer has no merge list: it repeatedly joins the adjacent pair
    whose joined text is a token with the highest score (leftmost on a tie). A BPE model that ranks
    every two-part split of every token by that token's score does the same joins, except when two
    different tokens share a score and compete for overlapping pairs (then the lower id wins here).
    """
    assert vocab.scores is not None
    scores = vocab.scores
    ranked: list[tuple[float, int, int, str, str]] = []
    for token_id, token in enumerate(vocab.tokens):
        # Control and byte tokens are matched whole or used as fallback, never built by merging.
        if vocab.token_types[token_id] in (_CONTROL, _BYTE) or len(token) < 2:
            continue
        if token_ids.get(token) != token_id:
            continue  # a duplicate string: the first id is the one text maps to
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in token_ids and right in token_ids:
                ranked.append((-scores[token_id], token_id, cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]


def _special_added_tokens(vocab: _GgufVocab) -> list[AddedToken]:
    """Tokens that llama.cpp matches whole in text when it parses special tokens.

    Control and unknown tokens (``<|im_start|>``, ``<s>``, ``<unk>``) become special tokens, so
    ``skip_special_tokens`` drops them; user-defined ones (``<think>``) are matched whole too but
    stay ordinary text when decoding. End-of-turn texts are control tokens whatever their type
    says, as in llama.cpp.
    """
    named = {vocab.bos_id, vocab.eos_id, vocab.unk_id, vocab.pad_id} - {None}
    added: list[AddedToken] = []
    seen: set[str] = set()
    for token_id, (token, kind) in enumerate(zip(vocab.tokens, vocab.token_types, strict=True)):
        special = kind in (_CONTROL, _UNKNOWN) or token_id in named or token in END_OF_TURN_TEXTS
        if not (special or kind == _USER_DEFINED) or not token or token in seen:
            continue
        seen.add(token)
        strip = vocab.rstrip_specials and rstrip(token, kind in (_CONTROL, _USER_DEFINED, _UNKNOWN))
        added.append(AddedToken(token, special=special, normalized=False, rstrip=strip))
    return added


def _post_processor(vocab: _GgufVocab) -> processors.TemplateProcessing:
    # BOS/EOS as the file asks, so plain encode() gives llama.cpp's add_special=True ids.
    bos = vocab.token(vocab.bos_id) if vocab.add_bos else None
    eos = vocab.token(vocab.eos_id) if vocab.add_eos else None

    def sequence(piece: str, type_id: int) -> list[str]:
        parts = [f"{piece}:{type_id}"]
        if bos is not None:
            parts.insert(0, f"{bos}:{type_id}")
        if eos is not None:
            parts.append(f"{eos}:{type_id}")
        return parts

    specials = [
        (token, token_id)
        for token, token_id in ((bos, vocab.bos_id), (eos, vocab.eos_id))
        if token is not None and token_id is not None
    ]
    return processors.TemplateProcessing(
        single=sequence("$A", 0),
        pair=sequence("$A", 0) + sequence("$B", 1),
        special_tokens=specials,
    )


def _byte_level_tokenizer(vocab: _GgufVocab) -> Tokenizer:
    token_ids = _vocab_dict(vocab.tokens)
    assert vocab.merges is not None
    style = BYTE_LEVEL_PRE[vocab.pre]
    tokenizer = Tokenizer(
        models.BPE(
            vocab=token_ids,
            merges=_usable_merges(vocab.merges, token_ids),
            ignore_merges=style.ignore_merges,
        )
    )
    steps: list[pre.PreTokenizer] = []
    if style.digits_alone:
        steps.append(pre.Digits(individual_digits=True))
    if style.split is not None:
        steps.append(pre.Split(Regex(style.split), behavior="isolated"))
    # With no split of its own, ByteLevel applies GPT-2's pattern itself.
    steps.append(pre.ByteLevel(add_prefix_space=False, use_regex=style.split is None))
    tokenizer.pre_tokenizer = pre.Sequence(steps) if len(steps) > 1 else steps[0]
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _sentencepiece_tokenizer(vocab: _GgufVocab) -> Tokenizer:
    token_ids = _vocab_dict(vocab.tokens)
    if vocab.scores is not None:
        merges = _merges_from_scores(vocab, token_ids)  # what llama.cpp uses
    else:
        assert vocab.merges is not None
        merges = _usable_merges(vocab.merges, token_ids)
    tokenizer = Tokenizer(
        models.BPE(
            vocab=token_ids,
            merges=merges,
            unk_token=vocab.token(vocab.unk_id),
            byte_fallback=True,
            fuse_unk=True,
        )
    )
    # A normalizer, not Metaspace: llama.cpp puts "▁" before every run of text (at the start and
    # after each special token) even when the text already starts with a space, and Metaspace
    # skips the prefix in that case.
    steps: list[normalizers.Normalizer] = []
    if vocab.add_space_prefix:
        steps.append(normalizers.Prepend(_SPM_SPACE))
    steps.append(normalizers.Replace(" ", _SPM_SPACE))
    tokenizer.normalizer = normalizers.Sequence(steps)
    parts: list[decoders.Decoder] = [
        decoders.Replace(_SPM_SPACE, " "),
        decoders.ByteFallback(),
        decoders.Fuse(),
    ]
    if vocab.add_space_prefix:
        parts.append(decoders.Strip(content=" ", left=1, right=0))
    tokenizer.decoder = decoders.Sequence(parts)
    return tokenizer


def _backend_tokenizer(vocab: _GgufVocab) -> Tokenizer:
    if vocab.model == "gpt2":
        tokenizer = _byte_level_tokenizer(vocab)
    else:
        tokenizer = _sentencepiece_tokenizer(vocab)
    # Every added token is already in the model's vocabulary, so each keeps its GGUF id.
    # add_special_tokens() would mark all of them special; user-defined ones must stay text.
    added = _special_added_tokens(vocab)
    tokenizer.add_special_tokens([t for t in added if t.special])
    tokenizer.add_tokens([t for t in added if not t.special])
    tokenizer.post_processor = _post_processor(vocab)
    return tokenizer


SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _settings(vocab: _GgufVocab) -> dict[str, Any]:
    """The tokenizer's settings, both as constructor arguments and as tokenizer_config.json."""
    settings: dict[str, Any] = {
        "bos_token": vocab.token(vocab.bos_id),
        "eos_token": vocab.token(vocab.eos_id),
        "unk_token": vocab.token(vocab.unk_id),
        "pad_token": vocab.token(vocab.pad_id),
        "add_bos_token": vocab.add_bos,
        "add_eos_token": vocab.add_eos,
        # Decoding must give back the text exactly; the cleanup would glue " ," into ",".
        "clean_up_tokenization_spaces": False,
    }
    if vocab.context_length is not None:
        settings["model_max_length"] = vocab.context_length
    if vocab.chat_template is not None:
        settings["chat_template"] = vocab.chat_template
    return settings


def _wrap(vocab: _GgufVocab) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=_backend_tokenizer(vocab), **_settings(vocab))


def tokenizer_from_gguf_metadata(meta: Mapping[str, Any]) -> PreTrainedTokenizerFast:
    """The GGUF file's tokenizer as a fast Hugging Face tokenizer.

    ``meta`` maps GGUF metadata keys to plain Python values. Raises TokenizerConversionError when
    the metadata lacks what a tokenizer needs or describes a tokenizer that is not supported.
    """
    return _wrap(_read_vocab(meta))


def write_tokenizer_files(meta: Mapping[str, Any], out_dir: Path) -> None:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into ``out_dir``.

    ``transformers.AutoTokenizer.from_pretrained(out_dir)`` loads the result offline, and
    tokenizer_config.json carries the chat template itself (not only a chat_template.jinja beside
    it), since onnxruntime-genai reads the template from there.
    """
    vocab = _read_vocab(meta)
    tokenizer = _wrap(vocab)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # transformers 5 would move the template to chat_template.jinja and drop add_bos_token /
    # add_eos_token from the config; keep one copy of everything, in tokenizer_config.json.
    tokenizer.save_pretrained(str(out_dir), save_jinja_files=False)
    (out_dir / "chat_template.jinja").unlink(missing_ok=True)

    config_path = out_dir / "tokenizer_config.json"
    config: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    settings = _settings(vocab)
    config.pop("chat_template", None)  # back below only if the GGUF file has one
    config.update(settings)
    # Known to transformers 4 and 5 and to onnxruntime-extensions; transformers 5 writes its own
    # class name, "TokenizersBackend", which the latter does not know.
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    write_replacing(
        config_path, json.dumps(config, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    )

    present = {key: settings[key] for key in SPECIAL_TOKEN_KEYS if settings[key] is not None}
    write_replacing(
        out_dir / "special_tokens_map.json",
        json.dumps(present, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
    )
