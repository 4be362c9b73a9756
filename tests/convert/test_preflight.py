"""Refusals from the GGUF header alone: named, and without hashing or parsing the whole file.

The large files here are sparse (os.truncate past the end): 8 GiB on paper, nothing on disk.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import gguf
import pytest

from chatapp.convert import converter
from chatapp.convert.converter import convert_gguf
from chatapp.convert.errors import ConversionError
from chatapp.convert.preflight import check_convertible, read_header
from chatapp.convert.weights import SUPPORTED_TYPES
from tests.tiny_model import write_tiny_gguf

BIG = 8 << 30


@pytest.fixture
def no_full_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the converter hashes the file or hands it to gguf's reader."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the whole file was read before the refusal")

    monkeypatch.setattr(converter, "sha256_file", refuse)
    monkeypatch.setattr(gguf, "GGUFReader", refuse)


def sparse(path: Path, size: int = BIG) -> Path:
    os.truncate(path, size)
    assert path.stat().st_blocks * 512 < 64 << 20  # really sparse: nothing written
    return path


def header_only(path: Path, arch: str, tensors: list[tuple[str, int, tuple[int, ...]]]) -> Path:
    """A GGUF header written by hand (so it may hold type ids gguf-py does not know)."""

    def string(s: str) -> bytes:
        data = s.encode()
        return struct.pack("<Q", len(data)) + data

    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1)
    out += string("general.architecture") + struct.pack("<I", 8) + string(arch)
    offset = 0
    for name, type_id, shape in tensors:
        out += string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", type_id, offset)
        offset += 1 << 20
    path.write_bytes(out)
    return path


def test_unknown_architecture_in_a_huge_file(tmp_path: Path, no_full_read: None) -> None:
    src = sparse(write_tiny_gguf(tmp_path / "falcon.gguf", architecture="falcon"))
    with pytest.raises(ConversionError, match=r"falcon\.gguf is a 'falcon' model: .*llama"):
        convert_gguf(src, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_unsupported_tensor_type_in_a_huge_file(tmp_path: Path, no_full_read: None) -> None:
    src = write_tiny_gguf(tmp_path / "iq2.gguf", qtype="IQ2_XXS", hidden=256, ffn=512)
    with pytest.raises(ConversionError, match=r"'blk\.0\.attn_q\.weight' is stored as IQ2_XXS"):
        convert_gguf(sparse(src), tmp_path / "out")


def test_unknown_type_id_is_named(tmp_path: Path, no_full_read: None) -> None:
    src = header_only(tmp_path / "odd.gguf", "llama", [("blk.0.attn_q.weight", 99, (64, 64))])
    with pytest.raises(ConversionError, match=r"attn_q\.weight' has the unknown type id 99"):
        convert_gguf(sparse(src), tmp_path / "out")


def test_missing_architecture_is_named(tmp_path: Path, no_full_read: None) -> None:
    src = header_only(tmp_path / "anon.gguf", "llama", [])
    data = src.read_bytes().replace(b"general.architecture", b"general.architecturX")
    src.write_bytes(data)
    with pytest.raises(ConversionError, match=r"anon\.gguf does not say which architecture"):
        convert_gguf(src, tmp_path / "out")


def test_tensor_past_the_end_is_refused_before_hashing(tmp_path: Path, no_full_read: None) -> None:
    src = header_only(tmp_path / "short.gguf", "llama", [("token_embd.weight", 0, (64, 64))])
    with pytest.raises(ConversionError, match=r"short\.gguf is damaged or truncated.*token_embd"):
        convert_gguf(src, tmp_path / "out")


def test_shape_the_type_cannot_hold(tmp_path: Path, no_full_read: None) -> None:
    src = header_only(tmp_path / "odd.gguf", "llama", [("blk.0.ffn_up.weight", 12, (100, 4))])
    with pytest.raises(ConversionError, match=r"ffn_up\.weight' has rows of 100 values.*Q4_K"):
        convert_gguf(sparse(src), tmp_path / "out")


@pytest.mark.parametrize("keep", [4, 12, 30, 60, 200])
def test_cut_header_is_damaged_not_a_crash(tmp_path: Path, tiny_gguf: Path, keep: int) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:keep])
    with pytest.raises(ConversionError, match=r"cut\.gguf is damaged or truncated"):
        read_header(cut)


def test_absurd_counts_are_damaged(tmp_path: Path) -> None:
    path = tmp_path / "lies.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 1 << 60))
    with pytest.raises(ConversionError, match="damaged or truncated"):
        read_header(path)


def test_header_of_a_real_tiny_file(tiny_gguf: Path) -> None:
    header = check_convertible(tiny_gguf, ("llama",), SUPPORTED_TYPES)
    reader = gguf.GGUFReader(tiny_gguf)
    assert header.architecture == "llama"
    assert [t.name for t in header.tensors] == [t.name for t in reader.tensors]
    assert [t.type_id for t in header.tensors] == [int(t.tensor_type) for t in reader.tensors]
    assert header.data_start + header.tensors[0].offset == reader.tensors[0].data_offset
