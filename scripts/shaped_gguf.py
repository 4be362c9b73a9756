"""Write random-weight GGUF files in the shapes of real models, to measure size and speed.

    .venv/bin/python scripts/shaped_gguf.py 1b OUT.gguf [--type Q4_K_M] [--seed 0]
        [--tokenizer GGUF]
    .venv/bin/python scripts/shaped_gguf.py --list

The files follow llama.cpp's conventions for the llama architecture (and gemma3 for the Gemma 3
270M shape): its tensor names, its metadata keys and, per `--type`, the tensor types its quantize
presets choose (Q4_K_M: Q4_K matrices and embedding, Q6_K output and Q6_K on the attn_v /
ffn_down layers llama.cpp's `use_more_bits` picks; a matrix whose rows are not whole 256-value
super-blocks falls back as llama.cpp's quantizer does: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
IQ4_XS -> IQ4_NL, and such an output or tied embedding is Q8_0). The tokenizer (vocabulary,
merges, chat template) is SmolLM2's, copied from the bundled default GGUF: 49,152 tokens, padded
with unused tokens to the shape's vocabulary where it has more (Gemma 3: 262,144); `--tokenizer`
copies another GGUF's tokenizer.* keys instead (only its header is read: the first part of a
split file will do).

The codes are random bytes; every block scale is a small finite fp16, so a model built from these
weights gives finite logits (nonsense tokens). Nothing here is meant to be exact: only sizes and
speed count. Tensors are written one at a time, so an 8B file needs about 150 MB of memory.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    rope_theta: float
    context: int
    tied: bool  # no output.weight: the token embedding doubles as the output matrix
    arch: str = "llama"  # or "gemma3": Q/K norms, post-norms, sliding window on 5 of 6 layers
    head_dim: int = 0  # 0: hidden / heads
    vocab: int = 0  # 0: the tokenizer's; more: its token list padded with unused tokens
    window: int = 0  # gemma3's sliding window

    @property
    def head(self) -> int:
        return self.head_dim or self.hidden // self.heads


SHAPES = {
    # TinyLlama-1.1B: head size 64.
    "1b": Shape("TinyLlama-1.1B shape", 22, 2048, 5632, 32, 4, 10000.0, 2048, False),
    # Llama-3.2-3B: tied embeddings, head size 128.
    "3b": Shape("Llama-3.2-3B shape", 28, 3072, 8192, 24, 8, 500000.0, 131072, True),
    # Llama-3-8B.
    "8b": Shape("Llama-3-8B shape", 32, 4096, 14336, 32, 8, 500000.0, 8192, False),
    # Small shapes for tests: a few hundred MB and a few MB of weights.
    "300m": Shape("300M test shape", 8, 1024, 2816, 16, 4, 10000.0, 2048, False),
    "tiny": Shape("tiny test shape", 2, 256, 512, 4, 2, 10000.0, 512, False),
    # Gemma 3 270M: hidden 640 (not whole super-blocks), 4 heads of 256 / 1 KV, a tied embedding
    # over 262,144 tokens, window 512 on 5 of every 6 layers.
    "gemma3-270m": Shape(
        "Gemma-3-270M shape",
        18,
        640,
        2048,
        4,
        1,
        1000000.0,
        32768,
        True,
        arch="gemma3",
        head_dim=256,
        vocab=262144,
        window=512,
    ),
    # Qwen2.5-0.5B in the llama architecture (Qwen2's Q/K/V biases left out): hidden 896 (not
    # whole super-blocks), 14 heads of 64 / 2 KV, a tied embedding. Write it with
    # `--tokenizer` naming a GGUF that holds Qwen's tokenizer.* keys (152k tokens).
    "qwen2.5-0.5b": Shape("Qwen2.5-0.5B shape", 24, 896, 4864, 14, 2, 1000000.0, 32768, True),
}

Q = gguf.GGMLQuantizationType
# llama.cpp's file type ids (LLAMA_FTYPE_MOSTLY_*) and each preset's default matrix type.
PRESETS: dict[str, tuple[int, Q]] = {
    "Q4_0": (2, Q.Q4_0),
    "Q4_1": (3, Q.Q4_1),
    "Q8_0": (7, Q.Q8_0),
    "Q5_0": (8, Q.Q5_0),
    "Q5_1": (9, Q.Q5_1),
    "Q4_K_M": (15, Q.Q4_K),
    "Q5_K_M": (17, Q.Q5_K),
    "Q6_K": (18, Q.Q6_K),
    "IQ4_XS": (30, Q.IQ4_XS),
}


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's choice of the attn_v / ffn_down layers that get more bits in *_K_M."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


# llama.cpp's quantizer, for a matrix whose rows are not whole blocks of the type it chose.
FALLBACK: dict[Q, Q] = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0, Q.IQ4_XS: Q.IQ4_NL}


def tensor_type(preset: str, role: str, layer: int, shape: Shape, cols: int = 0) -> Q:
    """The type llama.cpp's quantize gives a tensor of `cols` values per row (the rules for a
    plain llama or gemma3 model: no experts, no importance matrix)."""
    cols = cols or shape.hidden
    chosen = _preset_type(preset, role, layer, shape, cols)
    if cols % gguf.GGML_QUANT_SIZES[chosen][0]:
        if chosen not in FALLBACK:
            raise ValueError(f"{preset} has no type for rows of {cols} values")
        chosen = FALLBACK[chosen]
    return chosen


def _preset_type(preset: str, role: str, layer: int, shape: Shape, cols: int) -> Q:
    base = PRESETS[preset][1]
    if role == "output":  # also a tied embedding: the output's rules
        if base == Q.Q8_0 or cols % gguf.GGML_QUANT_SIZES[base][0]:
            return Q.Q8_0
        return Q.Q6_K
    if preset in ("Q4_K_M", "Q5_K_M") and role in ("attn_v", "ffn_down"):
        return Q.Q6_K if use_more_bits(layer, shape.layers) else base
    if preset == "IQ4_XS":
        if role == "attn_v" and shape.heads // shape.kv_heads >= 4:
            return Q.Q5_K
        if role == "ffn_down" and layer < shape.layers // 8:
            return Q.Q5_K
    return base


# Per type: where its fp16 scale (and min) sit in a block, and values that keep weights near
# the spread of a trained model's (about 0.01 to 0.05).
@dataclass(frozen=True)
class BlockLayout:
    scale_at: int
    scale: float
    min_at: int | None = None
    min_value: float = 0.0
    fix: Callable[[np.ndarray], None] | None = None  # adjusts other fields in place


def _small_q6_k_scales(blocks: np.ndarray) -> None:
    # Q6_K's 16 int8 sub-block scales: 1..8 instead of random -128..127.
    blocks[:, 192:208] = (blocks[:, 192:208] & 0x07) + 1


LAYOUTS: dict[Q, BlockLayout] = {
    Q.Q4_0: BlockLayout(0, 0.004),
    Q.Q4_1: BlockLayout(0, 0.004, 2, -0.03),
    Q.Q5_0: BlockLayout(0, 0.002),
    Q.Q5_1: BlockLayout(0, 0.002, 2, -0.03),
    Q.Q8_0: BlockLayout(0, 0.0003),
    Q.Q4_K: BlockLayout(0, 0.0001, 2, 0.0007),
    Q.Q5_K: BlockLayout(0, 0.00006, 2, 0.0007),
    Q.Q6_K: BlockLayout(208, 0.0002, fix=_small_q6_k_scales),
    Q.IQ4_XS: BlockLayout(0, 0.00003),
    Q.IQ4_NL: BlockLayout(0, 0.0003),
}


def random_blocks(rng: np.random.Generator, qtype: Q, rows: int, cols: int) -> np.ndarray:
    """[rows, bytes per row] uint8 of random codes with sane scales."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    count = rows * cols // block
    blocks = np.frombuffer(bytearray(rng.bytes(count * size)), dtype=np.uint8).reshape(count, size)
    layout = LAYOUTS[qtype]
    blocks[:, layout.scale_at : layout.scale_at + 2] = _f16_bytes(layout.scale)
    if layout.min_at is not None:
        blocks[:, layout.min_at : layout.min_at + 2] = _f16_bytes(layout.min_value)
    if layout.fix is not None:
        layout.fix(blocks)
    return blocks.reshape(rows, cols // block * size)


def _f16_bytes(value: float) -> np.ndarray:
    return np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)


@dataclass(frozen=True)
class TensorPlan:
    name: str
    qtype: Q
    rows: int  # GGUF's ne[1]: output features
    cols: int  # GGUF's ne[0]: input features


def plan(shape: Shape, preset: str, vocab: int) -> list[TensorPlan]:
    q_rows, kv = shape.head * shape.heads, shape.head * shape.kv_heads
    gemma = shape.arch == "gemma3"
    embd = "output" if shape.tied else "token_embd"
    out = [
        TensorPlan("token_embd.weight", tensor_type(preset, embd, 0, shape), vocab, shape.hidden)
    ]
    for i in range(shape.layers):

        def add(role: str, rows: int, cols: int, layer: int = i) -> None:
            if role.endswith("norm"):
                qtype = Q.F32
            else:
                qtype = tensor_type(preset, role, layer, shape, cols)
            out.append(TensorPlan(f"blk.{layer}.{role}.weight", qtype, rows, cols))

        add("attn_norm", 1, shape.hidden)
        add("attn_q", q_rows, shape.hidden)
        add("attn_k", kv, shape.hidden)
        add("attn_v", kv, shape.hidden)
        if gemma:
            add("attn_q_norm", 1, shape.head)
            add("attn_k_norm", 1, shape.head)
        add("attn_output", shape.hidden, q_rows)
        if gemma:
            add("post_attention_norm", 1, shape.hidden)
        add("ffn_norm", 1, shape.hidden)
        add("ffn_gate", shape.ffn, shape.hidden)
        add("ffn_up", shape.ffn, shape.hidden)
        add("ffn_down", shape.hidden, shape.ffn)
        if gemma:
            add("post_ffw_norm", 1, shape.hidden)
    out.append(TensorPlan("output_norm.weight", Q.F32, 1, shape.hidden))
    if not shape.tied:
        out.append(
            TensorPlan(
                "output.weight", tensor_type(preset, "output", 0, shape), vocab, shape.hidden
            )
        )
    return out


def nbytes(t: TensorPlan) -> int:
    block, size = gguf.GGML_QUANT_SIZES[t.qtype]
    return t.rows * t.cols // block * size


class _HeaderReader(gguf.GGUFReader):
    """A GGUF's keys and values without its tensors: a truncated file (the first part of a
    split one) will do."""

    def _build_tensors(self, start_offs: int, fields: list[gguf.ReaderField]) -> None:
        self.tensors = []


def tokenizer_fields(
    source: Path,
) -> Iterator[tuple[str, object, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """(key, value, type, item type) of every tokenizer.* key in `source`."""
    reader = _HeaderReader(source)
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        yield key, field.contents(), vtype, sub


def padded_tokenizer(
    fields: list[tuple[str, object, gguf.GGUFValueType, gguf.GGUFValueType | None]], vocab: int
) -> list[tuple[str, object, gguf.GGUFValueType, gguf.GGUFValueType | None]]:
    """The tokenizer with `vocab` tokens: unused ones appended (llama.cpp checks that the
    embedding has a row per token; unused tokens are never produced by its tokenizer)."""
    out = []
    for key, value, vtype, sub in fields:
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
            have = list(value)  # type: ignore[call-overload]
            if key.endswith("tokens"):
                extra: list[object] = [f"<unused{i}>" for i in range(vocab - len(have))]
            else:
                extra = [int(gguf.TokenType.UNUSED)] * (vocab - len(have))
            value = have + extra
        out.append((key, value, vtype, sub))
    return out


def default_tokenizer_source() -> Path:
    from chatapp.convert.default_model import bundled_gguf

    return bundled_gguf()


def write_shaped_gguf(
    path: Path,
    shape: Shape,
    preset: str = "Q4_K_M",
    seed: int = 0,
    tokenizer_source: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Write the file tensor by tensor; returns its size in bytes."""
    source = tokenizer_source or default_tokenizer_source()
    fields = list(tokenizer_fields(source))
    vocab = next(len(v) for k, v, _t, _s in fields if k == "tokenizer.ggml.tokens")  # type: ignore[arg-type]
    if shape.vocab > vocab:
        fields, vocab = padded_tokenizer(fields, shape.vocab), shape.vocab
    tensors = plan(shape, preset, vocab)
    writer = gguf.GGUFWriter(path, shape.arch)
    writer.add_name(f"{shape.name} {preset} (random weights)")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    if shape.head_dim:
        writer.add_key_length(shape.head_dim)
        writer.add_value_length(shape.head_dim)
    if shape.window:
        writer.add_sliding_window(shape.window)
    if shape.arch == "llama":
        writer.add_rope_dimension_count(shape.head)
    writer.add_rope_freq_base(shape.rope_theta)
    writer.add_layer_norm_rms_eps(1e-6 if shape.arch == "gemma3" else 1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(PRESETS[preset][0])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for key, value, vtype, sub in fields:
        writer.add_key_value(key, value, vtype, sub)
    for t in tensors:
        if t.qtype == Q.F32:
            writer.add_tensor_info(t.name, [t.cols], np.dtype(np.float32), t.cols * 4)
        else:
            writer.add_tensor_info(
                t.name, [t.rows, nbytes(t) // t.rows], np.dtype(np.uint8), nbytes(t), t.qtype
            )
    rng = np.random.default_rng(seed)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    total = sum(nbytes(t) for t in tensors)
    done = 0
    for t in tensors:
        if t.qtype == Q.F32:
            data = (1.0 + 0.05 * rng.standard_normal(t.cols)).astype(np.float32)
        else:
            data = random_blocks(rng, t.qtype, t.rows, t.cols)
        writer.write_tensor_data(data)
        done += nbytes(t)
        if progress is not None:
            progress(done, total)
        del data
    writer.close()
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("shape", nargs="?", choices=sorted(SHAPES))
    parser.add_argument("out", nargs="?", type=Path)
    parser.add_argument("--type", default="Q4_K_M", choices=sorted(PRESETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tokenizer", type=Path, help="a GGUF whose tokenizer.* keys to copy")
    parser.add_argument("--list", action="store_true", help="print the shapes and exit")
    args = parser.parse_args()
    if args.list or args.shape is None or args.out is None:
        for key, s in SHAPES.items():
            print(
                f"{key:5} {s.name}: {s.layers} layers, hidden {s.hidden}, ffn {s.ffn}, "
                f"{s.heads} heads / {s.kv_heads} KV{', tied' if s.tied else ''}"
            )
        return
    started = time.perf_counter()
    tmp = args.out.with_name(args.out.name + ".writing")
    size = write_shaped_gguf(tmp, SHAPES[args.shape], args.type, args.seed, args.tokenizer)
    tmp.replace(args.out)
    print(f"{args.out}: {size / 1e6:.0f} MB in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
