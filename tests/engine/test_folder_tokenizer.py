"""tokenizer.json loaded with `tokenizers` alone gives transformers' ids, text and settings."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.read import read_tokenizer_files
from chatapp.engine.text.chat import FolderTokenizer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "onnx_folders"
GENERIC = [
    p.name
    for p in sorted(FIXTURES.iterdir())
    if json.loads((p / "tokenizer_config.json").read_text()).get("tokenizer_class")
    in ("PreTrainedTokenizerFast", "TokenizersBackend")
]
TEXTS = [
    "Hello there, the answer is in an hour.",
    "Grüße aus Köln — naïve café ☕ 🚀 日本語のテキスト",
    "  spaces\n\nand\ttabs  ",
    "don't stop , it 's fine . Really ?",
    "12345 + 678 = 13023; def f(x):\n    return x**2",
    "",
]


def _specials(hf: Any) -> list[str]:
    return [str(t.content) for t in hf.added_tokens_decoder.values() if t.special]


def check_same_as_transformers(folder: Path) -> None:
    ours = FolderTokenizer.load(read_tokenizer_files(folder))
    assert ours is not None
    hf = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    texts = [*TEXTS, "".join(f"a{s} b" for s in _specials(hf))]  # control tokens in text
    for text in texts:
        for add in (False, True):
            assert ours.encode(text, add_special_tokens=add) == hf.encode(
                text, add_special_tokens=add
            ), (text, add)
        plain = hf.encode(text, add_special_tokens=False, split_special_tokens=True)
        assert ours.encode(text, add_special_tokens=False, split_special_tokens=True) == plain
        ids = hf.encode(text, add_special_tokens=True)
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == hf.decode(
                ids, skip_special_tokens=skip
            ), (text, skip)
    assert ours.special_tokens_map == hf.special_tokens_map
    assert (ours.bos_token_id, ours.eos_token_id) == (hf.bos_token_id, hf.eos_token_id)
    assert ours.chat_template == hf.chat_template
    assert len(ours) == len(hf)
    assert ours.get_vocab() == hf.get_vocab()
    assert {i: str(t) for i, t in ours.added_tokens_decoder.items()} == {
        i: str(t) for i, t in hf.added_tokens_decoder.items()
    }
    assert set(hf.all_special_ids) <= set(ours.all_special_ids)
    some = [0, 1, len(hf) - 1, *hf.all_special_ids]
    assert [ours.convert_ids_to_tokens(i) for i in some] == hf.convert_ids_to_tokens(some)
    assert ours.convert_tokens_to_ids(["<unk>", "x"]) == hf.convert_tokens_to_ids(["<unk>", "x"])


@pytest.mark.parametrize("name", GENERIC)
def test_fixture_folders_match_transformers(name: str) -> None:
    check_same_as_transformers(FIXTURES / name)


def test_converted_folders_match_transformers(tiny_model_dir: Path) -> None:
    check_same_as_transformers(tiny_model_dir)


def test_the_default_model_matches_transformers(default_model_dir: Path) -> None:
    check_same_as_transformers(default_model_dir)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "m"
    shutil.copytree(FIXTURES / "optimum-llama", out)
    return out


def _edit_config(folder: Path, **changes: Any) -> None:
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_a_class_of_its_own_is_left_to_transformers(folder: Path) -> None:
    _edit_config(folder, tokenizer_class="LlamaTokenizer")
    assert FolderTokenizer.load(read_tokenizer_files(folder)) is None


@pytest.fixture
def qwen(tmp_path: Path) -> Path:
    out = tmp_path / "qwen"
    shutil.copytree(FIXTURES / "genai-qwen2-int4", out)  # tokenizer_class Qwen2Tokenizer
    return out


def _edit_tokenizer_json(folder: Path, **changes: Any) -> None:
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_qwen2_folders_match_transformers(qwen: Path) -> None:
    check_same_as_transformers(qwen)
    # Qwen2.5's own tokenizer_config.json: no BOS, no unknown token, its added tokens listed.
    added = json.loads((qwen / "tokenizer.json").read_text())["added_tokens"]
    _edit_config(
        qwen,
        add_bos_token=False,
        add_prefix_space=False,
        bos_token=None,
        unk_token=None,
        errors="replace",
        split_special_tokens=False,
        added_tokens_decoder={
            str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added
        },
        additional_special_tokens=[t["content"] for t in added[1:]],
    )
    check_same_as_transformers(qwen)


def test_qwen2_special_tokens_default_as_transformers_defaults_them(qwen: Path) -> None:
    config = json.loads((qwen / "tokenizer_config.json").read_text())
    for key in ("unk_token", "eos_token", "pad_token"):
        del config[key]
    (qwen / "tokenizer_config.json").write_text(json.dumps(config))
    check_same_as_transformers(qwen)
    ours = FolderTokenizer.load(read_tokenizer_files(qwen))
    assert ours is not None and ours.special_tokens_map["eos_token"] == "<|endoftext|>"


def test_qwen2_gets_its_class_pipeline_whatever_tokenizer_json_says(qwen: Path) -> None:
    _edit_tokenizer_json(
        qwen,
        normalizer=None,
        pre_tokenizer={"type": "Whitespace"},
        decoder={"type": "Fuse"},
    )
    check_same_as_transformers(qwen)  # transformers rebuilds them: so does FolderTokenizer
    _edit_config(qwen, add_prefix_space=True)
    check_same_as_transformers(qwen)


def test_qwen2_with_other_bpe_settings_is_left_to_transformers(qwen: Path) -> None:
    model = json.loads((qwen / "tokenizer.json").read_text())["model"]
    _edit_tokenizer_json(qwen, model={**model, "byte_fallback": True})
    assert FolderTokenizer.load(read_tokenizer_files(qwen)) is None


def test_a_special_token_tokenizer_json_lacks_is_left_to_transformers(folder: Path) -> None:
    assert FolderTokenizer.load(read_tokenizer_files(folder)) is not None
    _edit_config(folder, image_token="<image>")  # transformers would add it
    assert FolderTokenizer.load(read_tokenizer_files(folder)) is None


def test_a_models_own_special_tokens_are_read_as_transformers_reads_them(folder: Path) -> None:
    special = _specials(AutoTokenizer.from_pretrained(str(folder), local_files_only=True))
    _edit_config(
        folder,
        image_token=special[-1],  # a model-specific special token: in the map
        boi_token={"content": special[0], "special": True},  # a serialized one: a setting
        add_bos_token=False,
        extra_special_tokens={"audio_token": special[0]},
    )
    check_same_as_transformers(folder)
    ours = FolderTokenizer.load(read_tokenizer_files(folder))
    assert ours is not None and ours.special_tokens_map["image_token"] == special[-1]
    assert "boi_token" not in ours.special_tokens_map
    assert ours.special_tokens_map["audio_token"] == special[0]


def test_the_special_tokens_file_counts_only_without_added_tokens_in_the_config(
    folder: Path,
) -> None:
    special = _specials(AutoTokenizer.from_pretrained(str(folder), local_files_only=True))
    stored = json.loads((folder / "special_tokens_map.json").read_text())
    stored["eos_token"] = special[1]
    (folder / "special_tokens_map.json").write_text(json.dumps(stored))
    check_same_as_transformers(folder)  # the config's added_tokens_decoder: the file is unread
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["added_tokens_decoder"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    check_same_as_transformers(folder)
    ours = FolderTokenizer.load(read_tokenizer_files(folder))
    assert ours is not None and ours.special_tokens_map["eos_token"] == special[1]


def test_config_added_tokens_that_differ_are_left_to_transformers(folder: Path) -> None:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (first, token), *_ = config["added_tokens_decoder"].items()
    _edit_config(folder, added_tokens_decoder={str(int(first) + 1): token})
    assert FolderTokenizer.load(read_tokenizer_files(folder)) is None


def test_an_added_tokens_file_is_left_to_transformers(folder: Path) -> None:
    (folder / "added_tokens.json").write_text('{"<new>": 5000}')
    assert FolderTokenizer.load(read_tokenizer_files(folder)) is None


def test_a_template_folder_is_left_to_transformers_and_may_not_lead_out(
    folder: Path, tmp_path: Path
) -> None:
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tools.jinja").write_text("{{ messages }}")
    assert FolderTokenizer.load(read_tokenizer_files(folder)) is None
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(folder / "additional_chat_templates")
    (folder / "additional_chat_templates").symlink_to(outside)
    with pytest.raises(ModelError, match="not a folder inside"):
        read_tokenizer_files(folder)
    (folder / "additional_chat_templates").unlink()
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tools.jinja").symlink_to(outside / "x.jinja")
    (outside / "x.jinja").write_text("{{ messages }}")
    with pytest.raises(ModelError, match="leads outside"):
        read_tokenizer_files(folder)


def test_the_tokenizer_opens_no_small_file_of_the_folder_again(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = read_tokenizer_files(folder)
    opened: list[str] = []
    real_open = Path.open

    def watching(self: Path, *args: Any, **kwargs: Any) -> Any:
        opened.append(self.name)
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", watching)
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: opened.append(self.name))
    assert FolderTokenizer.load(files) is not None
    assert opened == []  # only tokenizer.json, which tokenizers opens itself


def test_the_chat_template_file_comes_before_the_config(folder: Path) -> None:
    (folder / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    _edit_config(folder, chat_template="from the config")
    ours = FolderTokenizer.load(read_tokenizer_files(folder))
    assert ours is not None and ours.chat_template == "{{ messages[0]['content'] }}"
    (folder / "chat_template.jinja").unlink()
    _edit_config(folder, chat_template=[{"name": "default", "template": "d"}])
    ours = FolderTokenizer.load(read_tokenizer_files(folder))
    assert ours is not None and ours.chat_template == {"default": "d"}


def test_clean_up_spaces_is_skipped_for_bpe_as_transformers_does(folder: Path) -> None:
    _edit_config(folder, clean_up_tokenization_spaces=True)
    check_same_as_transformers(folder)


def test_special_tokens_as_text_leave_the_shared_setting_off(folder: Path) -> None:
    ours = FolderTokenizer.load(read_tokenizer_files(folder))
    assert ours is not None
    special = next(str(t) for t in ours.added_tokens_decoder.values() if t.special)
    normal = ours.encode(special, add_special_tokens=False)
    as_text = ours.encode(special, add_special_tokens=False, split_special_tokens=True)
    assert len(normal) == 1 and len(as_text) > 1
    assert ours.encode(special, add_special_tokens=False) == normal
    assert ours.backend_tokenizer.encode_special_tokens is False


def test_encodes_from_many_threads_each_get_their_own_ids(folder: Path) -> None:
    ours = FolderTokenizer.load(read_tokenizer_files(folder))
    assert ours is not None
    special = next(str(t) for t in ours.added_tokens_decoder.values() if t.special)
    text = f"some text {special} and more " * 200
    expected = {
        False: ours.encode(text, add_special_tokens=False),
        True: ours.encode(text, add_special_tokens=False, split_special_tokens=True),
    }
    assert expected[False] != expected[True]
    wrong: list[bool] = []

    def work(split: bool) -> None:
        for _ in range(20):
            got = ours.encode(text, add_special_tokens=False, split_special_tokens=split)
            if got != expected[split]:
                wrong.append(split)

    threads = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
