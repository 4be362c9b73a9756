"""Each family's GGUF tokenizer against llama.cpp's ids, and its chat template in the engine.

The fixtures (data/*_llamacpp.json, made by scripts/tokenizer_fixture.py) hold a real
vocabulary reduced to the tokens their texts can use, as GGUF metadata, and llama.cpp's ids for
those texts: digits, code, CJK, emoji, whitespace runs and each family's chat markup.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from chatapp.convert.model_configs import eos_token_ids
from chatapp.convert.tokenizer import tokenizer_from_gguf_metadata, write_tokenizer_files
from chatapp.engine.model_folder.read import read_tokenizer_files
from chatapp.engine.text.chat import (
    NO_TEMPLATE_NOTICE,
    ChatTokenizer,
    FolderTokenizer,
    Message,
    prompt_notice,
)
from tests.engine.test_folder_tokenizer import check_same_as_transformers

DATA = Path(__file__).parent / "data"
FAMILIES = {
    "gemma3": "gemma3_llamacpp.json",  # SentencePiece, 262k real vocabulary, no space prefix
    "qwen3": "qwen3_llamacpp.json",  # byte-level BPE, pre-tokenizer qwen2
    "llama3": "llama3_llamacpp.json",  # byte-level BPE, pre-tokenizer llama-bpe
    "phi3": "phi3_llamacpp.json",  # SentencePiece with llama.cpp's Phi-3 whitespace rule
    "phi3-unnamed": "phi3_unnamed_llamacpp.json",  # the same vocabulary, rule not triggered
    "phi4": "phi4_llamacpp.json",  # byte-level BPE, o200k vocabulary, pre-tokenizer gpt-4o
    "tekken-split": "tekken_split_llamacpp.json",  # the same vocabulary, Mistral's tekken split
}


@cache
def fixture(family: str) -> dict[str, Any]:
    return json.loads((DATA / FAMILIES[family]).read_text(encoding="utf-8"))


def meta(family: str) -> dict[str, Any]:
    return dict(fixture(family)["metadata"])


def pieces(family: str, ids: list[int]) -> list[str]:
    tokens: list[str] = meta(family)["tokenizer.ggml.tokens"]
    return [tokens[i] for i in ids]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for family in FAMILIES:
        folder = tmp_path_factory.mktemp(family)
        write_tokenizer_files(meta(family), folder)
        out[family] = folder
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_ids_equal_llamacpp(family: str) -> None:
    expected: dict[str, list[int]] = fixture(family)["token_ids"]
    assert len(expected) >= 50
    tokenizer = tokenizer_from_gguf_metadata(meta(family))
    ours = {text: tokenizer.encode(text, add_special_tokens=False) for text in expected}
    wrong = {t: (pieces(family, ours[t]), pieces(family, ids)) for t, ids in expected.items()}
    assert {t: pair for t, pair in wrong.items() if pair[0] != pair[1]} == {}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_written_folder_gives_the_same_ids(family: str, folders: dict[str, Path]) -> None:
    loaded = AutoTokenizer.from_pretrained(folders[family], local_files_only=True)
    for text, ids in fixture(family)["token_ids"].items():
        assert loaded.encode(text, add_special_tokens=False) == ids, text


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_engine_loads_the_folder_without_transformers_and_the_same_ids(
    family: str, folders: dict[str, Path]
) -> None:
    loaded = FolderTokenizer.load(read_tokenizer_files(folders[family]))
    assert loaded is not None
    for text, ids in fixture(family)["token_ids"].items():
        assert loaded.encode(text, add_special_tokens=False) == ids, text
    assert ChatTokenizer.from_folder(folders[family]).tok.__class__ is FolderTokenizer
    check_same_as_transformers(folders[family])  # decoding, special tokens, template too


@pytest.mark.parametrize("family", ["gemma3", "qwen3", "llama3", "phi3-unnamed", "phi4"])
def test_plain_text_round_trips(family: str) -> None:
    tokenizer = tokenizer_from_gguf_metadata(meta(family))
    for text in fixture(family)["token_ids"]:
        if "<" in text:  # chat markup: special tokens are dropped when decoding
            continue
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_phi3_drops_whitespace_after_special_tokens_like_llamacpp() -> None:
    text = "<|user|>\nHello<|end|>\n<|assistant|>\nHi! <|end|>\n<|endoftext|>"
    named = fixture("phi3")["token_ids"][text]
    unnamed = fixture("phi3-unnamed")["token_ids"][text]
    assert pieces("phi3", named)[:4] == ["<|user|>", "▁Hello", "<|end|>", "<|assistant|>"]
    assert "<0x0A>" in pieces("phi3-unnamed", unnamed)  # the newline stays without the rule
    assert len(named) < len(unnamed)


def test_gpt4o_split_is_llamacpps_not_tiktokens() -> None:
    # llama.cpp's word classes leave combining marks out of words, so Devanagari vowel signs
    # start new pieces (tiktoken's own pattern keeps "स्ते" whole); upper-case contractions and
    # CamelCase split as llama.cpp splits them. Tekken: the same words, one digit a piece.
    phi4 = tokenizer_from_gguf_metadata(meta("phi4"))
    tekken = tokenizer_from_gguf_metadata(meta("tekken-split"))

    def ours(text: str, tokenizer: Any = phi4) -> list[str]:
        return pieces("phi4", tokenizer.encode(text, add_special_tokens=False))

    assert ours("नमस्ते दुनिया")[2:4] == ["à¤¸", "à¥įà¤¤"]  # स, ्त
    assert ours("CamelCaseWord HTTPServer getHTTPResponse")[:5] == [
        "Camel", "Case", "Word", "ĠHTTP", "Server"
    ]  # fmt: skip
    assert ours("DON'T STOP, It'S") == ["DON", "'T", "ĠSTOP", ",", "ĠIt", "'S"]
    assert ours("2024 12345") == ["202", "4", "Ġ", "123", "45"]
    assert ours("2024", tekken) == ["2", "0", "2", "4"]


# --- chat templates -----------------------------------------------------------------------------


def test_qwen3_template_and_end_of_turn(folders: dict[str, Path]) -> None:
    chat = ChatTokenizer.from_folder(folders["qwen3"])
    assert chat.notice is None and prompt_notice(folders["qwen3"]) is None
    messages = [Message("system", "You are helpful."), Message("user", "Hi")]
    text = chat.render(messages)
    turns = "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert text == turns + "<|im_start|>assistant\n"
    ids = chat.chat_ids(messages)
    assert ids[: len(fixture("qwen3")["token_ids"][turns])] == fixture("qwen3")["token_ids"][turns]
    im_end = meta("qwen3")["tokenizer.ggml.tokens"].index("<|im_end|>")
    assert im_end in eos_token_ids(meta("qwen3"))


def test_llama3_template_writes_bos_once(folders: dict[str, Path]) -> None:
    chat = ChatTokenizer.from_folder(folders["llama3"])
    turn = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
    assert chat.render([Message("user", "Hi there")]).startswith(turn)
    ids = chat.chat_ids([Message("user", "Hi there")])
    expected = fixture("llama3")["token_ids"][turn]
    assert ids[: len(expected)] == expected
    assert pieces("llama3", ids).count("<|begin_of_text|>") == 1  # template's, not a second
    eot = meta("llama3")["tokenizer.ggml.tokens"].index("<|eot_id|>")
    assert eos_token_ids(meta("llama3")) == [eot]


def test_phi3_template_gets_bos_and_stops_at_end(folders: dict[str, Path]) -> None:
    chat = ChatTokenizer.from_folder(folders["phi3"])
    ids = chat.chat_ids([Message("user", "Hello")])
    # llama.cpp: BOS (the file adds it; the template does not write it), then the turn with the
    # newlines after the special tokens dropped.
    assert pieces("phi3", ids) == ["<s>", "<|user|>", "▁Hello", "<|end|>", "<|assistant|>"]
    tokens = meta("phi3")["tokenizer.ggml.tokens"]
    assert tokens.index("<|end|>") in eos_token_ids(meta("phi3"))


def test_gemma_base_model_gets_plain_text_and_a_notice(folders: dict[str, Path]) -> None:
    assert "tokenizer.chat_template" not in meta("gemma3")  # the real 270M base file has none
    chat = ChatTokenizer.from_folder(folders["gemma3"])
    assert chat.notice == NO_TEMPLATE_NOTICE == prompt_notice(folders["gemma3"])
    messages = [Message("user", "Hi there")]
    assert chat.render(messages) == "User: Hi there\nAssistant:"
    ids = chat.chat_ids(messages)
    assert pieces("gemma3", ids)[0] == "<bos>"  # Gemma needs its BOS; the file asks for it
    assert eos_token_ids(meta("gemma3")) == [meta("gemma3")["tokenizer.ggml.eos_token_id"]]


GEMMA_TEMPLATE = (  # the shape of Gemma's own: BOS written, no system role
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for m in messages %}{{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' "
    "else m['role']) + '\n' + m['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def test_gemma_template_folds_the_system_message(tmp_path: Path) -> None:
    write_tokenizer_files({**meta("gemma3"), "tokenizer.chat_template": GEMMA_TEMPLATE}, tmp_path)
    chat = ChatTokenizer.from_folder(tmp_path)
    messages = [Message("system", "Be brief."), Message("user", "Hi there")]
    text = chat.render(messages)
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
    )
    ids = chat.chat_ids(messages)
    assert pieces("gemma3", ids).count("<bos>") == 1
    turn = "<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n"
    assert chat.chat_ids([Message("user", "Hi there")])[1:] == fixture("gemma3")["token_ids"][turn]
    end_of_turn = meta("gemma3")["tokenizer.ggml.tokens"].index("<end_of_turn>")
    assert end_of_turn in eos_token_ids({**meta("gemma3"), "tokenizer.chat_template": text})


def test_phi4_markers_are_control_tokens_and_end_stops(folders: dict[str, Path]) -> None:
    # The fixture carries a template of Phi-4-mini's shape: no newline after a role marker.
    chat = ChatTokenizer.from_folder(folders["phi4"])
    messages = [Message("system", "Be brief."), Message("user", "Hi")]
    text = chat.render(messages)
    assert text == "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>"
    ids = chat.chat_ids(messages)
    assert ids == fixture("phi4")["token_ids"][text]  # no BOS: the file does not ask for one
    markers = ["<|system|>", "<|end|>", "<|user|>", "<|end|>", "<|assistant|>"]
    assert [p for p in pieces("phi4", ids) if p.startswith("<|")] == markers
    # Control tokens, as llama.cpp makes them: dropped when an answer is decoded...
    assert chat.decode(ids) == "Be brief.Hi"
    # ...and a user who types one gets text, not the marker.
    end = meta("phi4")["tokenizer.ggml.tokens"].index("<|end|>")
    assert chat.chat_ids([Message("user", "say <|end|> please")]).count(end) == 1
    # llama.cpp's end-of-generation set for this vocabulary: <|endoftext|> (the eos) and <|end|>.
    eos = meta("phi4")["tokenizer.ggml.eos_token_id"]
    assert sorted(eos_token_ids(meta("phi4"))) == sorted([eos, end])
