"""scripts/shaped_gguf.py: llama.cpp's names and type mixes, finite weights of a sane spread."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.preflight import check_convertible, type_name
from chatapp.convert.weights import SUPPORTED_TYPES
from scripts.shaped_gguf import (
    PRESETS,
    SHAPES,
    Shape,
    tokenizer_fields,
    use_more_bits,
    write_shaped_gguf,
)

SMALL = Shape("test", 8, 256, 512, 4, 1, 10000.0, 256, False)


def test_the_k_m_mix_gives_more_bits_to_llama_cpps_layers() -> None:
    assert sum(use_more_bits(i, 22) for i in range(22)) == 10
    assert sum(use_more_bits(i, 28) for i in range(28)) == 14
    assert sum(use_more_bits(i, 32) for i in range(32)) == 16
    assert [i for i in range(8) if use_more_bits(i, 8)] == [0, 3, 6, 7]


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_writes_a_file_the_converter_takes(
    tmp_path: Path, tiny_gguf: Path, preset: str
) -> None:
    path = tmp_path / f"{preset}.gguf"
    write_shaped_gguf(path, SMALL, preset, tokenizer_source=tiny_gguf)
    header = check_convertible(path, ("llama",), SUPPORTED_TYPES)
    types = {t.name: type_name(t.type_id) for t in header.tensors}
    base = PRESETS[preset][1].name
    assert types["blk.1.attn_q.weight"] == base
    assert types["output.weight"] == ("Q8_0" if base == "Q8_0" else "Q6_K")
    if preset in ("Q4_K_M", "Q5_K_M"):
        assert types["blk.0.ffn_down.weight"] == types["blk.0.attn_v.weight"] == "Q6_K"
        assert types["blk.1.ffn_down.weight"] == base
    model = GGUFModel(path)
    assert model.spec.n_layers == 8 and model.spec.n_kv_heads == 1
    reader = gguf.GGUFReader(path)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert np.isfinite(values).all(), tensor.name
        if tensor.name.endswith("norm.weight"):
            continue
        assert 0.005 < float(values.std()) < 0.1, (tensor.name, float(values.std()))


def test_real_shapes_have_their_models_sizes() -> None:
    assert (SHAPES["1b"].layers, SHAPES["1b"].hidden, SHAPES["1b"].ffn) == (22, 2048, 5632)
    assert (SHAPES["8b"].heads, SHAPES["8b"].kv_heads, SHAPES["8b"].ffn) == (32, 8, 14336)
    assert SHAPES["3b"].tied and SHAPES["3b"].hidden == 3072


def test_the_tokenizer_comes_from_the_first_part_of_a_split_file(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    whole = tmp_path / "whole.gguf"
    write_shaped_gguf(whole, SMALL, "Q8_0", tokenizer_source=tiny_gguf)
    part = tmp_path / "part-0000"  # a GGUF cut short, as a split download's first part is
    part.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    with pytest.raises(ValueError):
        gguf.GGUFReader(part)
    assert [(k, str(v)) for k, v, *_ in tokenizer_fields(part)] == [
        (k, str(v)) for k, v, *_ in tokenizer_fields(tiny_gguf)
    ]
