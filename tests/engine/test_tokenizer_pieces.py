"""A long text in pieces gives the whole text's ids, for every tokenizer family that is cut."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

from chatapp.convert.tokenizer import write_tokenizer_files
from chatapp.engine.model_folder.read import read_tokenizer_files
from chatapp.engine.text.chat import FolderTokenizer
from chatapp.engine.text.tokenizer_pieces import LONG_TEXT, QWEN2_SPLIT, TextPieces
from tests.convert.test_tokenizer_families import FAMILIES, fixture, meta

FIXTURES = Path(__file__).parent.parent / "fixtures" / "onnx_folders"
# Families whose text is cut (the others are encoded whole): their pipelines are known.
CUT_FAMILIES = {"gemma3", "qwen3", "llama3"}
VARIED = [
    "The quick brown fox didn't jump; it's 'S fine. ",
    "def f(x):\n    return x ** 2  # square\n\n\n\tif y:\n\t\tpass\n",
    "   \n   \n\n\n\n\n\n\n\n\n\n\n\nafter many newlines\r\nwindows line\r\n",
    " " * 300 + "word" + "\t" * 20 + "tab\n",
    "日本語のテキストと中文文本，没有空格。한국어 텍스트 ",
    "emoji 🚀🔥 👩‍👩‍👧 flags 🇫🇷 and ☕ ",
    "café naïve e\u0301 combining 한 jamo \u1100\u1161 ",
    "12345 and 3.14159 and 2024-11-27, x1y2z3 ½ Ⅻ ",
    "Ωμέγα ΣΊΣΥΦΟΣ москва عربي עברית ",
    "<tag attr='v'>text</tag> {\"json\": [1, 2, null]} a_b-c ",
    "word\n",
    "lines end with letters\nand begin with them\n",
]


def varied_text(seed: int, fragments: list[str], count: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(fragments) for _ in range(count))


def assert_pieces_give_whole_ids(backend: Tokenizer, pieces: TextPieces, text: str) -> int:
    cut = pieces.cut(text)
    assert "".join(cut) == text
    whole = backend.encode(text, add_special_tokens=False).ids
    one_by_one = [i for piece in cut for i in backend.encode(piece, add_special_tokens=False).ids]
    assert one_by_one == whole
    return len(cut)


def pieces_for(tok: FolderTokenizer, size: int) -> TextPieces | None:
    return TextPieces.for_tokenizer(
        tok.backend_tokenizer, tok.added_tokens_decoder.values(), size=size
    )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_corpus_in_pieces_gives_the_whole_texts_ids(family: str, tmp_path: Path) -> None:
    write_tokenizer_files(meta(family), tmp_path)
    tok = FolderTokenizer.load(read_tokenizer_files(tmp_path))
    assert tok is not None
    corpus = list(fixture(family)["token_ids"])
    if pieces_for(tok, 8) is None:
        assert family not in CUT_FAMILIES
        return
    assert family in CUT_FAMILIES
    for seed, size in enumerate((3, 8, 40, 200)):
        pieces = pieces_for(tok, size)
        assert pieces is not None
        text = varied_text(seed, corpus, 400)
        assert assert_pieces_give_whole_ids(tok.backend_tokenizer, pieces, text) > 20


def _folder_tokenizers() -> list[str]:
    return sorted(p.name for p in FIXTURES.iterdir())


@pytest.mark.parametrize("name", _folder_tokenizers())
def test_fixture_folders_in_pieces_give_the_whole_texts_ids(name: str) -> None:
    tok = FolderTokenizer.load(read_tokenizer_files(FIXTURES / name))
    assert tok is not None
    for seed, size in enumerate((2, 9, 64)):
        pieces = pieces_for(tok, size)
        assert pieces is not None  # GPT-2's split or Qwen 2's: all of them are cut
        text = varied_text(seed, VARIED, 300)
        assert assert_pieces_give_whole_ids(tok.backend_tokenizer, pieces, text) > 50


def test_the_default_model_in_pieces_gives_the_whole_texts_ids(default_model_dir: Path) -> None:
    tok = FolderTokenizer.load(read_tokenizer_files(default_model_dir))
    assert tok is not None
    for seed, size in enumerate((2, 9, 64, 1000)):
        pieces = pieces_for(tok, size)
        assert pieces is not None
        text = varied_text(seed, VARIED, 600)
        assert assert_pieces_give_whole_ids(tok.backend_tokenizer, pieces, text) > 20


def test_a_long_text_is_encoded_in_pieces_with_the_same_ids(default_model_dir: Path) -> None:
    tok = FolderTokenizer.load(read_tokenizer_files(default_model_dir))
    assert tok is not None and tok._pieces is not None
    text = varied_text(7, VARIED, 3000)
    assert len(text) > 2 * LONG_TEXT and len(tok._pieces.cut(text)) > 2
    whole = tok.backend_tokenizer.encode(text, add_special_tokens=False).ids
    assert tok.encode(text, add_special_tokens=False) == whole
    as_text = tok.encode(text, add_special_tokens=False, split_special_tokens=True)
    assert as_text == whole  # no control token in it
    special = next(str(t) for t in tok.added_tokens_decoder.values() if t.special)
    marked = text + special + text
    assert (
        tok.encode(marked, add_special_tokens=False).count(
            tok.backend_tokenizer.token_to_id(special)
        )
        == 1
    )
    assert tok.encode(marked, add_special_tokens=True) == (
        tok.backend_tokenizer.encode(marked, add_special_tokens=True).ids
    )


def _trained(
    pre_tokenizer: pre_tokenizers.PreTokenizer | None,
    normalizer: normalizers.Normalizer | None,
    added: list[AddedToken],
) -> Tokenizer:
    """A small BPE trained on the varied texts, with merges across spaces where nothing splits."""
    from tokenizers.trainers import BpeTrainer

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    trainer = BpeTrainer(vocab_size=600, special_tokens=["<unk>"], show_progress=False)
    tokenizer.train_from_iterator(VARIED * 20, trainer)
    tokenizer.add_tokens(added)
    return tokenizer


def test_without_a_pre_tokenizer_only_the_newline_token_makes_cuts() -> None:
    replace = normalizers.Sequence([normalizers.Replace(" ", "\u2581")])
    newlines = [AddedToken("\n" * n, normalized=False) for n in range(1, 6)]
    gemma_like = _trained(None, replace, newlines)
    pieces = TextPieces.for_tokenizer(gemma_like, newlines, size=5)
    assert pieces is not None
    for seed in range(3):
        text = varied_text(seed, VARIED, 200)
        assert assert_pieces_give_whole_ids(gemma_like, pieces, text) > 20
    # Without the newline token a line is one word of BPE: no cut is safe.
    assert TextPieces.for_tokenizer(_trained(None, replace, []), [], size=5) is None


@pytest.mark.parametrize(
    "pre_tokenizer",
    [
        pre_tokenizers.Metaspace(),
        pre_tokenizers.Whitespace(),
        pre_tokenizers.Split(Regex(r"\w+|\s+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=True),
    ],
)
def test_an_unknown_pre_tokenizer_is_encoded_whole(
    pre_tokenizer: pre_tokenizers.PreTokenizer,
) -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizer
    assert TextPieces.for_tokenizer(tokenizer, []) is None


@pytest.mark.parametrize(
    "normalizer",
    [
        normalizers.Prepend("\u2581"),  # before every run of text: each piece would get one
        normalizers.Replace("  ", " "),
        normalizers.Strip(),
        normalizers.Lowercase(),
    ],
)
def test_a_normalizer_that_sees_more_than_one_character_is_encoded_whole(
    normalizer: normalizers.Normalizer,
) -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated")
    assert TextPieces.for_tokenizer(tokenizer, []) is None


@pytest.mark.parametrize(
    "token",
    [
        AddedToken("<x>", lstrip=True),
        AddedToken("<x>", rstrip=True),
        AddedToken("x", single_word=True),
        AddedToken("end of line\n"),  # a letter and a space or newline: it may span a cut
    ],
)
def test_an_added_token_that_may_span_a_cut_is_encoded_whole(token: AddedToken) -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert TextPieces.for_tokenizer(tokenizer, [AddedToken("<ok>")]) is not None
    assert TextPieces.for_tokenizer(tokenizer, [token]) is None


def test_cuts_go_after_a_letter_before_a_space_or_newline() -> None:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    pieces = TextPieces.for_tokenizer(tokenizer, [], size=4)
    assert pieces is not None
    assert pieces.cut("short") == ["short"]
    assert pieces.cut("abcd efgh ijkl mnop") == ["abcd efgh", " ijkl", " mnop"]
    assert pieces.cut("ab\ncd\nef\ngh\nij") == ["ab\ncd", "\nef\ngh", "\nij"]
    assert pieces.cut("1234 5678 9012 3456 ab") == ["1234 5678 9012 3456 ab"]  # digits: none
    assert pieces.cut("abcd. efgh. ijkl. mnop.") == ["abcd. efgh. ijkl. mnop."]
    assert pieces.cut("ⅻⅻⅻⅻ ⅻⅻⅻⅻ ⅻⅻⅻⅻ x") == ["ⅻⅻⅻⅻ ⅻⅻⅻⅻ ⅻⅻⅻⅻ x"]  # numbers, not letters
    assert pieces.cut("日本語の テキスト と 中文 文本") == ["日本語の テキスト", " と 中文 文本"]


def test_json_state_of_a_split_names_its_pattern() -> None:
    """The check reads the pattern from the pre-tokenizer's tokenizer.json form."""
    split = pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated")
    assert json.loads(split.__getstate__())["pattern"]["Regex"] == QWEN2_SPLIT
