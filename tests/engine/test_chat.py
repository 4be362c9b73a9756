"""Chat template and the incremental detokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine.chat import ChatTokenizer, IncrementalDetokenizer, Message

TEXTS = [
    "Hello there, the answer is in an hour.",
    "Grüße aus Köln — naïve café ☕ 🚀 日本語のテキスト",
    "  spaces\n\nand\ttabs  ",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> ChatTokenizer:
    return ChatTokenizer(tiny_model_dir)


@pytest.mark.parametrize("text", TEXTS)
def test_deltas_add_up_to_the_text_and_are_whole_characters(
    tokenizer: ChatTokenizer, text: str
) -> None:
    ids = tokenizer.encode(text)
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push(i) for i in ids]
    deltas.append(detok.flush())
    assert "".join(deltas) == text
    assert not any("\ufffd" in d for d in deltas)


def test_multibyte_characters_wait_for_their_last_byte(tokenizer: ChatTokenizer) -> None:
    ids = tokenizer.encode("🚀")
    assert len(ids) == 4  # the tiny vocabulary has only byte tokens for it
    detok = IncrementalDetokenizer(tokenizer)
    assert [detok.push(i) for i in ids] == ["", "", "", "🚀"]


def test_chat_template_renders_roles_and_generation_prompt(tokenizer: ChatTokenizer) -> None:
    text = tokenizer.render([Message("system", "Be brief."), Message("user", "Hi")])
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tokenizer.chat_ids([Message("user", "Hi")])
    start = tokenizer.tok.convert_tokens_to_ids("<|im_start|>")
    assert ids[0] == start and ids.count(start) == 2


def test_folder_without_template_uses_a_plain_one(tiny_model_dir: Path, tmp_path: Path) -> None:
    import json
    import shutil

    folder = tmp_path / "no-template"
    shutil.copytree(tiny_model_dir, folder)
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tok = ChatTokenizer(folder)
    assert not tok.has_template
    assert tok.render([Message("user", "Hi")]) == "User: Hi\nAssistant:"
