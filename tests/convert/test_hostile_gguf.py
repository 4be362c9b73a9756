"""Crafted and damaged GGUF files: each is refused with one clear line, quickly, in little memory.

Every case goes through `convert_gguf`, the path the CLI and the GUI take; nothing may be written
and no other exception than ConversionError may come out. A separate process measures the peak
memory of the refusals (scripts/hostile_gguf.py prints the figures).
"""

from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from chatapp.convert.converter import convert_gguf
from chatapp.convert.errors import ConversionError
from chatapp.convert.gguf_file import GGUFModel
from chatapp.convert.weight_scan import SCALE_FIELDS
from tests.convert.crafted_gguf import (
    ARRAY,
    FLOAT32,
    INT32,
    KV,
    STRING,
    UINT8,
    UINT32,
    UINT64,
    GGUFParts,
    Tensor,
    f16_bytes,
    gstr,
)

ROOT = Path(__file__).resolve().parents[2]
Q4_1, Q8_0, F32, F16, BF16 = 3, 8, 0, 1, 30


def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def huge_array_117_bytes() -> bytes:
    """The issue's file: 117 bytes declaring a 10^9-element metadata array."""
    data = header(0, 2) + gstr("general.architecture") + struct.pack("<I", STRING) + gstr("llama")
    data += gstr("tokenizer.ggml.scores") + struct.pack("<IIQ", ARRAY, FLOAT32, 10**9)
    return data.ljust(117, b"\0")


def raw(data: bytes) -> Callable[[GGUFParts], bytes]:
    return lambda _parts: data


def edit(change: Callable[[GGUFParts], object]) -> Callable[[GGUFParts], bytes]:
    def make(parts: GGUFParts) -> bytes:
        change(parts)
        return parts.to_bytes()

    return make


def set_kv(key: str, vtype: int, value: object, item: int | None = None) -> Callable:
    return edit(lambda p: p.set(key, vtype, value, item))


def set_tensor(name: str, **changes: object) -> Callable:
    def change(p: GGUFParts) -> None:
        for attr, value in changes.items():
            setattr(p.tensor(name), attr, value)

    return edit(change)


def poison(name: str, at: int, value: float = float("nan")) -> Callable:
    """Write a float16 NaN/Inf into the bytes of tensor `name` at byte `at`."""

    def change(p: GGUFParts) -> None:
        t = p.tensor(name)
        data = bytearray(t.data)
        data[at : at + 2] = f16_bytes([value])
        t.data = bytes(data)

    return edit(change)


def poison_f32(name: str, index: int, value: float) -> Callable:
    def change(p: GGUFParts) -> None:
        t = p.tensor(name)
        values = np.frombuffer(t.data, dtype=np.float32).copy()
        values[index] = value
        t.data = values.tobytes()

    return edit(change)


def add_tensor(tensor: Tensor) -> Callable:
    return edit(lambda p: p.tensors.append(tensor))


def array_head(item_type: int, count: int) -> bytes:
    return struct.pack("<IQ", item_type, count)


def two_kv_with_bad_key() -> bytes:
    return header(0, 1) + gstr(b"\xff\xfe") + struct.pack("<I", UINT8) + b"\x01"


LAYER = "blk.0.attn_q.weight"
# case -> (how to make it from the tiny model's parts, the message it must give)
CASES: dict[str, tuple[Callable[[GGUFParts], bytes], str]] = {
    # --- counts and lengths against the file size
    "117-byte-10^9-array": (raw(huge_array_117_bytes()), r"declares 1000000000 elements"),
    "10^9-string-array": (
        edit(lambda p: p.kv("tokenizer.ggml.tokens").__setattr__("raw", array_head(STRING, 10**9))),
        r"declares 1000000000 elements",
    ),
    "10^7-element-array": (
        edit(
            lambda p: p.kvs.append(
                KV("x.big", ARRAY, [], UINT8, raw=array_head(UINT8, 10**7) + bytes(10**7))
            )
        ),
        r"declares 10000000 elements",
    ),
    "nested-array": (
        edit(
            lambda p: p.kvs.append(
                KV(
                    "x.nested",
                    ARRAY,
                    [],
                    ARRAY,
                    raw=struct.pack("<IQIIQ", ARRAY, 1, ARRAY, UINT8, 10**12),
                )
            )
        ),
        r"array of arrays",
    ),
    "string-longer-than-file": (
        edit(
            lambda p: p.kvs.insert(
                0, KV("general.name", STRING, "", raw=struct.pack("<Q", 1 << 40))
            )
        ),
        r"declares 1099511627776 bytes|runs past the end",
    ),
    "string-length-2^64-1": (
        raw(header(0, 1) + struct.pack("<Q", (1 << 64) - 1) + b"abc" * 40),
        r"declares 18446744073709551615 bytes",
    ),
    "kv-count-2^64-1": (raw(header(0, (1 << 64) - 1)), r"declares 18446744073709551615 metadata"),
    "tensor-count-2^63": (raw(header(1 << 63, 0)), r"declares 9223372036854775808 tensors"),
    "unknown-value-type": (
        edit(lambda p: p.kvs.append(KV("x.odd", 77, 0, raw=b"\0" * 8))),
        r"unknown value type 77",
    ),
    "invalid-utf8-key": (raw(two_kv_with_bad_key()), r"not UTF-8"),
    "duplicate-key": (
        edit(lambda p: p.kvs.append(KV("llama.block_count", UINT32, 2))),
        r"'llama.block_count' appears twice",
    ),
    "version-1": (edit(lambda p: setattr(p, "version", 1)), r"GGUF version 1"),
    "version-99": (edit(lambda p: setattr(p, "version", 99)), r"GGUF version 99"),
    "big-endian": (edit(lambda p: setattr(p, "version", 3 << 24)), r"big-endian"),
    "alignment-zero": (set_kv("general.alignment", UINT32, 0), r"general.alignment = 0"),
    "alignment-not-power-of-two": (set_kv("general.alignment", UINT32, 24), r"alignment = 24"),
    "alignment-text": (set_kv("general.alignment", STRING, "32"), r"alignment = '32'"),
    # --- tensor descriptions
    "offset-near-2^64": (
        set_tensor(LAYER, offset=(1 << 64) - 64),
        r"ends past the end of the file",
    ),
    "offset-past-eof": (set_tensor(LAYER, offset=1 << 30), r"ends past the end of the file"),
    "misaligned-offset": (set_tensor(LAYER, offset=3), r"not a multiple of the file's alignment"),
    "overlapping-tensors": (set_tensor("blk.0.attn_k.weight", offset=0), r"overlap"),
    "dims-2^40-squared": (set_tensor(LAYER, dims=[1 << 40, 1 << 40]), r"past the end of the file"),
    "zero-dim": (set_tensor(LAYER, dims=[64, 0]), r"with an empty side"),
    "five-dims": (set_tensor(LAYER, dims=[64, 1, 1, 1, 64]), r"5 dimensions"),
    "unknown-tensor-type": (set_tensor(LAYER, type_id=4), r"unknown type id 4"),
    "type-id-2^31": (set_tensor(LAYER, type_id=1 << 31), r"unknown type id 2147483648"),
    "rows-not-whole-blocks": (set_tensor(LAYER, dims=[48, 64]), r"rows of 48 values"),
    "duplicate-tensor": (
        edit(lambda p: p.tensors.append(Tensor(LAYER, [64, 64], Q4_1, b"\0" * 2560))),
        r"appears twice",
    ),
    "tensor-name-1MB": (
        edit(lambda p: p.tensors.append(Tensor("x" * (1 << 20), [32], F32, b"\0" * 128))),
        r"tensor name declares 1048576 bytes",
    ),
    # --- hyper-parameters
    "zero-heads": (
        set_kv("llama.attention.head_count", UINT32, 0),
        r"'llama.attention.head_count' is 0",
    ),
    "zero-kv-heads": (set_kv("llama.attention.head_count_kv", UINT32, 0), r"head_count_kv' is 0"),
    "negative-heads": (set_kv("llama.attention.head_count", INT32, -4), r"head_count' is -4"),
    "heads-text": (set_kv("llama.attention.head_count", STRING, "four"), r"head_count' is 'four'"),
    "heads-not-dividing": (
        set_kv("llama.attention.head_count_kv", UINT32, 3),
        r"do not split into 3",
    ),
    "head-dim-mismatch": (
        edit(
            lambda p: p.set("llama.attention.key_length", UINT32, 32).set(
                "llama.rope.dimension_count", UINT32, 32
            )
        ),
        r"attn_q.weight' has the shape",
    ),
    "partial-rope": (set_kv("llama.rope.dimension_count", UINT32, 8), r"rotates 8 of 16"),
    "rope-theta-zero": (
        set_kv("llama.rope.freq_base", FLOAT32, 0.0),
        r"'llama.rope.freq_base' is 0.0",
    ),
    "rope-theta-negative": (set_kv("llama.rope.freq_base", FLOAT32, -1.0), r"freq_base' is -1.0"),
    "rope-theta-inf": (set_kv("llama.rope.freq_base", FLOAT32, float("inf")), r"freq_base' is inf"),
    "eps-nan": (
        set_kv("llama.attention.layer_norm_rms_epsilon", FLOAT32, float("nan")),
        r"layer_norm_rms_epsilon' is nan",
    ),
    "eps-zero": (
        set_kv("llama.attention.layer_norm_rms_epsilon", FLOAT32, 0.0),
        r"epsilon' is 0.0",
    ),
    "rope-scale-zero": (
        set_kv("llama.rope.scaling.factor", FLOAT32, 0.0),
        r"scaling.factor' is 0.0",
    ),
    "context-zero": (set_kv("llama.context_length", UINT32, 0), r"'llama.context_length' is 0"),
    "context-negative": (set_kv("llama.context_length", INT32, -5), r"context_length' is -5"),
    "context-2^40": (
        set_kv("llama.context_length", UINT64, 1 << 40),
        r"context_length is 1099511627776",
    ),
    "block-count-zero": (set_kv("llama.block_count", UINT32, 0), r"block_count' is 0"),
    "block-count-huge": (set_kv("llama.block_count", UINT32, 10**9), r"block_count is 1000000000"),
    "block-count-3-of-2": (
        set_kv("llama.block_count", UINT32, 3),
        r"no tensor 'blk.2.attn_norm.weight'",
    ),
    "embedding-mismatch": (
        edit(
            lambda p: p.set("llama.embedding_length", UINT32, 128).set(
                "llama.attention.key_length", UINT32, 16
            )
        ),
        r"token_embd.weight' has the shape",
    ),
    "ffn-mismatch": (set_kv("llama.feed_forward_length", UINT32, 256), r"ffn_.*has the shape"),
    "vocab-size-mismatch": (set_kv("llama.vocab_size", UINT32, 300), r"vocab_size' is 300.*269"),
    "eos-id-text": (
        set_kv("tokenizer.ggml.eos_token_id", STRING, "abc"),
        r"eos_token_id' is 'abc'",
    ),
    "eos-id-outside-vocab": (
        set_kv("tokenizer.ggml.eos_token_id", UINT32, 10**6),
        r"has 269 tokens",
    ),
    "scores-length": (
        set_kv("tokenizer.ggml.scores", ARRAY, [0.0] * 3, FLOAT32),
        r"3 entries for 269",
    ),
    "scores-nan": (
        set_kv("tokenizer.ggml.scores", ARRAY, [float("nan")] * 269, FLOAT32),
        r"'tokenizer.ggml.scores' is not a list of finite numbers",
    ),
    "name-1M-characters": (set_kv("general.name", STRING, "n" * 10**6), r"'general.name'"),
    "tokens-not-text": (
        set_kv("tokenizer.ggml.tokens", ARRAY, [1, 2], UINT32),
        r"not a list of text",
    ),
    "architecture-missing": (edit(lambda p: p.drop("general.architecture")), r"which architecture"),
    "architecture-number": (set_kv("general.architecture", UINT32, 7), r"which architecture"),
    "quantized-norm": (
        set_tensor("output_norm.weight", type_id=Q8_0, dims=[64], data=b"\0" * 68),
        r"output_norm.weight' is stored as Q8_0",
    ),
    "bias-shape": (
        add_tensor(Tensor("blk.0.attn_q.bias", [32], F32, b"\0" * 128)),
        r"attn_q.bias' has the shape \[32\]",
    ),
    # --- weights
    "nan-in-q4_1-scale": (poison(LAYER, 20 * 7), r"'blk.0.attn_q.weight' holds NaN"),
    "inf-in-q4_1-min": (
        poison("blk.1.ffn_down.weight", 2, float("inf")),
        r"'blk.1.ffn_down.weight'",
    ),
    "nan-in-q8_0-embedding": (poison("token_embd.weight", 34 * 100), r"'token_embd.weight' holds"),
    "nan-in-f32-norm": (poison_f32("blk.1.ffn_norm.weight", 5, float("nan")), r"ffn_norm.weight"),
    "inf-in-f32-norm": (poison_f32("output_norm.weight", 63, float("-inf")), r"output_norm.weight"),
}


def make_case(tmp_path: Path, tiny_gguf: Path, case: str) -> Path:
    make, _ = CASES[case]
    path = tmp_path / f"{case}.gguf"
    path.write_bytes(make(GGUFParts.from_file(tiny_gguf)))
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_crafted_file_is_refused_with_one_line(tmp_path: Path, tiny_gguf: Path, case: str) -> None:
    src = make_case(tmp_path, tiny_gguf, case)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=CASES[case][1]) as info:
        convert_gguf(src, out)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == [src.name]  # no partial folder left


@pytest.mark.parametrize("qtype", sorted(SCALE_FIELDS))
def test_scale_offsets_match_gguf_dequantization(qtype: str) -> None:
    """A NaN put where `SCALE_FIELDS` says a scale is makes gguf-py's dequantization NaN."""
    import gguf

    kind = gguf.GGMLQuantizationType[qtype]
    _, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    for at in SCALE_FIELDS[qtype]:
        block = bytearray(b"\x11" * block_bytes)
        block[at : at + 2] = f16_bytes([float("nan")])
        try:
            values = gguf.quants.dequantize(np.frombuffer(bytes(block), np.uint8), kind)
        except NotImplementedError:
            pytest.skip(f"gguf-py cannot dequantize {qtype}")
        assert not np.isfinite(values).all(), (qtype, at)
        block[at : at + 2] = f16_bytes([0.5])
        values = gguf.quants.dequantize(np.frombuffer(bytes(block), np.uint8), kind)
        assert np.isfinite(values).all(), (qtype, at)


def test_random_header_damage_never_escapes_as_another_error(
    tmp_path: Path, tiny_gguf: Path
) -> None:
    """300 copies with a few header bytes changed: each opens or gives a ConversionError."""
    data = tiny_gguf.read_bytes()
    header_end = GGUFModel(tiny_gguf).header.data_start  # metadata and tensor descriptions
    rng = random.Random(12)
    path = tmp_path / "fuzz.gguf"
    outcomes = {"opened": 0, "refused": 0}
    for _ in range(300):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(4, header_end)
            damaged[at] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        path.write_bytes(bytes(damaged))
        try:
            GGUFModel(path)
            outcomes["opened"] += 1
        except ConversionError as exc:
            assert "\n" not in str(exc)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 100, outcomes


def test_every_truncation_is_refused(tmp_path: Path, tiny_gguf: Path) -> None:
    data = tiny_gguf.read_bytes()
    data_end = max(t.offset + t.n_bytes for t in GGUFModel(tiny_gguf).header.tensors)
    path = tmp_path / "cut.gguf"
    for size in [*range(0, 64), *range(64, data_end, 97), data_end - 1]:
        path.write_bytes(data[:size])
        with pytest.raises(ConversionError):
            GGUFModel(path)


MEMORY_CASES = [
    "117-byte-10^9-array",
    "10^9-string-array",
    "10^7-element-array",
    "nested-array",
    "string-longer-than-file",
    "offset-near-2^64",
    "dims-2^40-squared",
    "zero-heads",
    "nan-in-q8_0-embedding",
]


def test_refusals_peak_memory_in_a_separate_process(tmp_path: Path, tiny_gguf: Path) -> None:
    """Each refusal in a fresh process: peak RSS (whole interpreter included) under 200 MB."""
    files = [make_case(tmp_path, tiny_gguf, case) for case in MEMORY_CASES]
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "hostile_gguf.py"), "--json", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["file"] for r in rows] == [f.name for f in files]
    for row in rows:
        assert row["refused"], row
        assert row["peak_rss_mb"] < 200, row


def test_an_end_token_of_minus_one_means_none(tmp_path: Path, tiny_gguf: Path) -> None:
    """llama.cpp writes -1 for "no such token": converted, and the folder opens."""
    from chatapp.engine.model_description import open_model_folder

    parts = GGUFParts.from_file(tiny_gguf).set("tokenizer.ggml.eot_token_id", INT32, -1)
    out = convert_gguf(parts.write(tmp_path / "eot.gguf"), tmp_path / "out")
    assert open_model_folder(out).eos_token_ids == (2,)
