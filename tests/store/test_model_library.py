"""The model library: listing, finding an earlier conversion by sha256, removing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chatapp.convert.converter import (
    ConvertOptions,
    convert_gguf,
    earlier_conversion,
    sha256_file,
)
from chatapp.store.model_library import (
    LibraryError,
    disk_usage,
    find_converted,
    library_folder,
    list_library,
    remove_model,
)


@pytest.fixture
def library(tiny_gguf: Path, tmp_path: Path) -> Path:
    models = tmp_path / "models"
    convert_gguf(tiny_gguf, models / "tiny-llama", ConvertOptions())
    onnx_folder = models / "hand-made"
    (onnx_folder / "onnx").mkdir(parents=True)
    (onnx_folder / "onnx" / "model_fp16.onnx").write_bytes(b"x" * 5000)
    (onnx_folder / "onnx" / "model_q4.onnx").write_bytes(b"x" * 3000)
    (models / "notes").mkdir()  # no graph: not a model
    (models / ".tiny.partial-1-abc").mkdir()  # a conversion's leftovers: hidden
    return models


def test_lists_models_with_size_source_and_precision(library: Path, tiny_gguf: Path) -> None:
    listed = {m.name: m for m in list_library(library)}
    assert set(listed) == {"tiny-llama", "hand-made"}
    tiny = listed["tiny-llama"]
    assert tiny.converted and tiny.source == tiny_gguf.name
    assert tiny.source_sha256 == sha256_file(tiny_gguf)
    assert tiny.size_bytes >= (library / "tiny-llama" / "model.onnx").stat().st_size
    hand = listed["hand-made"]
    assert not hand.converted and hand.source == "ONNX folder"
    assert hand.precision == "fp16, q4" and hand.size_bytes >= 8000
    assert list_library(library / "missing") == []


def test_gguf_type_is_read_from_the_source_name(tmp_path: Path) -> None:
    folder = tmp_path / "models" / "m"
    folder.mkdir(parents=True)
    manifest = {"converter": "chatapp", "source": {"file": "Llama-3.2-1B.Q4_K_M.gguf"}}
    (folder / "chatapp-manifest.json").write_text(json.dumps(manifest))
    (folder / "model.onnx").write_bytes(b"x")
    (model,) = list_library(tmp_path / "models")
    assert model.precision == "Q4_K_M (GGUF)"


def test_finds_an_intact_earlier_conversion_only(library: Path, tiny_gguf: Path) -> None:
    sha = sha256_file(tiny_gguf)
    assert find_converted(library, sha) == library / "tiny-llama"
    assert find_converted(library, "0" * 64) is None
    (library / "tiny-llama" / "tokenizer.json").write_text("{}")  # damaged: not reused
    assert find_converted(library, sha) is None


def test_removes_only_folders_of_the_library(library: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(LibraryError, match="not a folder of the model library"):
        remove_model(library, outside)
    link = library / "link"
    link.symlink_to(outside, target_is_directory=True)
    with pytest.raises(LibraryError, match="not a folder of the model library"):
        remove_model(library, link)
    assert outside.is_dir()
    remove_model(library, library / "hand-made")
    assert not (library / "hand-made").exists()
    assert [m.name for m in list_library(library)] == ["tiny-llama"]
    with pytest.raises(LibraryError, match="no longer there"):
        remove_model(library, library / "hand-made")


@pytest.mark.parametrize("link", ["folder_inside", "file_inside", "library_is_a_link"])
def test_removing_a_model_never_reaches_through_a_link(
    library: Path, tmp_path: Path, link: str
) -> None:
    """Issue 37: user files behind a link inside a model folder, or a library folder that is
    itself a link (to another disk), survive removing a model."""
    home = tmp_path / "home"
    (home / "photos").mkdir(parents=True)
    (home / "photos" / "a.jpg").write_text("jpeg")
    (home / "notes.txt").write_text("notes")
    models = library
    if link == "folder_inside":
        (library / "hand-made" / "weights").symlink_to(home, target_is_directory=True)
    elif link == "file_inside":
        (library / "hand-made" / "model.onnx.data").symlink_to(home / "notes.txt")
    else:
        models = tmp_path / "linked-library"
        models.symlink_to(library, target_is_directory=True)
    remove_model(models, models / "hand-made")
    assert not (library / "hand-made").exists()
    assert (home / "photos" / "a.jpg").read_text() == "jpeg"
    assert (home / "notes.txt").read_text() == "notes"


def test_disk_usage_counts_hard_links_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    once = disk_usage(tmp_path)
    (tmp_path / "b").hardlink_to(tmp_path / "a")
    assert disk_usage(tmp_path) == once > 0


def test_a_conversion_with_other_options_is_not_reused(library: Path, tiny_gguf: Path) -> None:
    sha = sha256_file(tiny_gguf)
    assert find_converted(library, sha, ConvertOptions(attention="standard")) is None
    assert find_converted(library, sha, ConvertOptions(overwrite=True)) == library / "tiny-llama"
    context = json.loads((library / "tiny-llama" / "chatapp-manifest.json").read_text())["options"][
        "context_length"
    ]
    assert find_converted(library, sha, ConvertOptions(context_length=context)) is not None
    assert find_converted(library, sha, ConvertOptions(context_length=context + 1)) is None


def test_earlier_conversion_hashes_only_a_file_of_a_recorded_size(
    library: Path, tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatapp.convert import converter

    assert earlier_conversion(tiny_gguf, library / "new-name") == library / "tiny-llama"
    assert earlier_conversion(tiny_gguf, library / "tiny-llama") == library / "tiny-llama"
    other = tmp_path / "big.gguf"
    with other.open("wb") as fh:
        fh.truncate(8 << 30)  # a sparse 8 GiB file no manifest records

    def no_hashing(_path: Path) -> str:
        raise AssertionError("hashed a file no conversion came from")

    monkeypatch.setattr(converter, "sha256_file", no_hashing)
    assert earlier_conversion(other, library / "big") is None
    assert earlier_conversion(tmp_path / "missing.gguf", library / "x") is None


def test_cli_convert_twice_makes_one_copy(tmp_path: Path, tiny_gguf: Path) -> None:
    from tests.convert.test_converter import run_cli

    models = tmp_path / "models"
    first = run_cli("convert", tiny_gguf, models / "tiny-llama", data_dir=tmp_path)
    assert first.returncode == 0, first.stderr
    again = run_cli("convert", tiny_gguf, models / "tiny.llama", data_dir=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == str(models / "tiny-llama")
    assert "already converted" in again.stderr and "not copied again" in again.stderr
    assert [p.name for p in models.iterdir()] == ["tiny-llama"]
    same = run_cli("convert", tiny_gguf, models / "tiny-llama", data_dir=tmp_path)
    assert same.returncode == 0 and same.stdout.splitlines()[-1] == str(models / "tiny-llama")
    other = run_cli("convert", tiny_gguf, models / "gqa-off", "--attention", "standard",
                    data_dir=tmp_path)  # fmt: skip
    assert other.returncode == 0 and (models / "gqa-off").is_dir()  # other options: converted


def test_a_model_is_found_by_its_plain_name_only(library: Path, tmp_path: Path) -> None:
    assert library_folder(library, "tiny-llama") == library / "tiny-llama"
    assert library_folder(library, "hand-made") == library / "hand-made"
    outside = tmp_path / "outside"
    shutil.copytree(library / "tiny-llama", outside)
    (library / "linked").symlink_to(outside)
    for name in (
        "",
        ".",
        "..",
        "notes",
        "missing",
        ".tiny.partial-1-abc",
        "linked",
        "../outside",
        str(outside),
        "tiny-llama/",
        "tiny-llama\\x",
        "tiny\0llama",
    ):
        assert library_folder(library, name) is None, name


@pytest.mark.parametrize("name", ["a" * 256, "é" * 128, "模" * 86, "a" * 5000])
def test_a_model_name_longer_than_any_file_name_is_no_folder(tmp_path: Path, name: str) -> None:
    """An imported chat names its model; a name over 255 bytes raised ENAMETOOLONG."""
    (tmp_path / "model").mkdir()
    assert library_folder(tmp_path, name) is None


DEEP = "[" * 100_000 + "]" * 100_000
HOSTILE_MANIFEST_PARTS = {
    "source nested 100k deep": ("source", DEEP),
    "source a string": ("source", '"x"'),
    "source a list": ("source", "[1]"),
    "files a list": ("files", '["model.onnx"]'),
    "a file outside the folder": ("files", '{"../outside.bin": "00", "model.onnx": "00"}'),
    "a hash that is a number": ("files", '{"model.onnx": 5}'),
    "options a string": ("options", '"auto"'),
    "a version of 5000 digits": ("converter_version", "9" * 5000),
    "past the size cap": ("padding", '"' + "x" * (2 << 20) + '"'),
}


@pytest.mark.parametrize("key,raw", HOSTILE_MANIFEST_PARTS.values(), ids=HOSTILE_MANIFEST_PARTS)
def test_a_damaged_manifest_is_no_conversion_of_ours_and_nothing_raises(
    library: Path, tiny_gguf: Path, key: str, raw: str
) -> None:
    """The app's own manifest is input too (issue 48): nested too deeply it raised
    RecursionError, a part of the wrong type AttributeError, from the model list, the
    earlier-conversion check and `convert --force`."""
    from chatapp.convert.converter import is_verified_copy
    from chatapp.convert.errors import ConversionError

    folder = library / "tiny-llama"
    path = folder / "chatapp-manifest.json"
    manifest = json.loads(path.read_text())
    manifest[key] = "@@"
    path.write_text(json.dumps(manifest).replace('"@@"', raw))
    listed = {m.name: m for m in list_library(library)}
    assert not listed["tiny-llama"].converted  # listed as a plain ONNX folder
    assert library_folder(library, "tiny-llama") == folder
    sha = sha256_file(tiny_gguf)
    assert find_converted(library, sha) is None and not is_verified_copy(folder, sha)
    assert earlier_conversion(tiny_gguf, library / "again") is None
    before = sorted(p.name for p in folder.iterdir())
    with pytest.raises(ConversionError, match="not made by chatapp"):
        convert_gguf(tiny_gguf, folder, ConvertOptions(overwrite=True))
    assert sorted(p.name for p in folder.iterdir()) == before
