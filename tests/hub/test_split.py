"""Split GGUFs (gguf-py's own split writer, as llama.cpp's converter uses it) joined into one
file that chatapp's GGUF reader reads as the unsplit file: the same metadata but the split
keys, the same tensors with the same bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chatapp.convert.gguf_reader import read_header, tensor_view
from chatapp.hub.download import sha256_of
from chatapp.hub.errors import HubError
from chatapp.hub.split import join_parts
from tests.tiny_model import write_tiny_gguf


def test_joined_parts_read_as_the_unsplit_file(tmp_path: Path) -> None:
    whole = write_tiny_gguf(tmp_path / "whole.gguf", seed=3)
    write_tiny_gguf(tmp_path / "tiny.gguf", seed=3, split_max_tensors=5)
    parts = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    assert len(parts) > 2
    joined = tmp_path / "joined.gguf"
    digest = join_parts(parts, joined)
    assert digest == sha256_of(joined)

    expected, expected_mm = read_header(whole)
    got, got_mm = read_header(joined)
    assert {k: v for k, v in got.metadata.items()} == {
        k: v for k, v in expected.metadata.items() if not k.startswith("split.")
    }
    assert not any(k.startswith("split.") for k in got.metadata)
    assert [(t.name, t.qtype, t.dims) for t in got.tensors] == [
        (t.name, t.qtype, t.dims) for t in expected.tensors
    ]
    for want, have in zip(expected.tensors, got.tensors, strict=True):
        assert np.array_equal(tensor_view(expected_mm, want), tensor_view(got_mm, have))


def test_a_damaged_part_is_refused_in_one_line(tmp_path: Path) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf", split_max_tensors=5)
    parts = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    parts[1].write_bytes(parts[1].read_bytes()[:200])
    with pytest.raises(HubError, match="cannot be joined") as caught:
        join_parts(parts, tmp_path / "joined.gguf")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "joined.gguf").exists()
    assert list(tmp_path.glob(".joined*")) == []
