"""Tiny Llama GGUF files made in the tests: random weights, a small byte-level BPE vocabulary.

They go through the same converter as real models, so every layer of the app can be tested in
seconds without the default model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import gguf
import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QType = gguf.GGMLQuantizationType
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "a n", "e r", "o n", "Ġ a", "r e", "Ġ s"]


def byte_level_alphabet() -> list[str]:
    """GPT-2's printable stand-in for each of the 256 bytes (a fixed public mapping)."""
    printable = list(range(ord("!"), ord("~") + 1))
    printable += list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    tokens = list(SPECIALS) + byte_level_alphabet()
    for merge in MERGES:
        tokens.append(merge.replace(" ", ""))
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types, list(MERGES)


# Per type: the float16 scale fields of one block (byte offset, and a range that keeps weights of
# order one); every other byte is codes. gguf-py cannot quantize to most of these types.
K_QUANT_SCALE_FIELDS: dict[str, tuple[tuple[int, float, float], ...]] = {
    "Q4_K": ((0, 5e-4, 1e-3), (2, 5e-4, 1e-3)),
    "Q5_K": ((0, 2e-4, 5e-4), (2, 2e-4, 5e-4)),
    "Q6_K": ((208, 1e-4, 3e-4),),
    "Q5_0": ((0, 5e-3, 1e-2),),
    "Q5_1": ((0, 5e-3, 1e-2), (2, -0.16, -0.08)),  # d, then the block minimum m
    "Q2_K": ((80, 5e-3, 1e-2), (82, 5e-3, 1e-2)),
    "Q3_K": ((108, 1e-3, 2e-3),),
    "IQ4_NL": ((0, 1e-3, 2e-3),),
    "IQ4_XS": ((0, 5e-5, 1e-4),),
    "IQ2_XXS": ((0, 1e-4, 2e-4),),  # not supported: for the refusal tests
}


def random_kquant(rows: int, cols: int, qtype: str, rng: np.random.Generator) -> np.ndarray:
    """Random but well-formed blocks of `qtype` (any type in K_QUANT_SCALE_FIELDS)."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    n_blocks = rows * cols // block_elems
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for offset, low, high in K_QUANT_SCALE_FIELDS[qtype]:
        scale = rng.uniform(low, high, size=n_blocks).astype(np.float16)
        raw[:, offset : offset + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, -1)


def _quantize(w: np.ndarray, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    if qtype == gguf.GGMLQuantizationType.F32:
        return w.astype(np.float32)
    if qtype == gguf.GGMLQuantizationType.F16:
        return w.astype(np.float16)
    return gguf.quants.quantize(w.astype(np.float32), qtype)


def write_tiny_gguf(
    path: Path,
    *,
    qtype: str = "Q4_1",
    embed_qtype: str = "Q8_0",
    n_layers: int = 2,
    hidden: int = 64,
    n_heads: int = 4,
    n_kv_heads: int = 2,
    ffn: int = 128,
    context: int = 512,
    architecture: str = "llama",
    tied: bool = True,
    seed: int = 0,
    tensor_types: Mapping[str, str] | None = None,
    chat_template: str | None = CHATML_TEMPLATE,
    split_max_tensors: int = 0,
) -> Path:
    """Write a small, valid Llama GGUF; every linear weight is stored as `qtype`.

    `tensor_types` gives some tensors another type, by kind ("attn_v", "ffn_down", "token_embd",
    "output", ...), the way llama.cpp's presets mix types. `chat_template` None: a base
    model's file, without one. `split_max_tensors`: llama.cpp's split files of that many
    tensors each (gguf-py names them `<stem>-00001-of-0000N.gguf`; `path` is then not written).
    """
    rng = np.random.default_rng(seed)
    tokens, types, merges = tiny_vocab()
    vocab = len(tokens)
    head_dim = hidden // n_heads
    writer = gguf.GGUFWriter(str(path), architecture, split_max_tensors=split_max_tensors)
    writer.add_name("tiny-llama-test")
    writer.add_block_count(n_layers)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    q = gguf.GGMLQuantizationType[qtype]
    overrides = dict(tensor_types or {})

    def matrix(
        name: str, rows: int, cols: int, scale: float, kind: gguf.GGMLQuantizationType
    ) -> None:
        kind = gguf.GGMLQuantizationType[overrides.get(name.split(".")[-2], kind.name)]
        if kind.name in K_QUANT_SCALE_FIELDS:
            data = random_kquant(rows, cols, kind.name, rng)
        else:
            data = _quantize(rng.normal(0.0, scale, size=(rows, cols)), kind)
        raw_dtype = (
            None if kind in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16) else kind
        )
        writer.add_tensor(name, data, raw_dtype=raw_dtype)

    def vector(name: str, size: int) -> None:
        writer.add_tensor(name, (1.0 + 0.1 * rng.normal(size=size)).astype(np.float32))

    embed_kind = gguf.GGMLQuantizationType[embed_qtype]
    matrix("token_embd.weight", vocab, hidden, 1.0, embed_kind)
    for i in range(n_layers):
        vector(f"blk.{i}.attn_norm.weight", hidden)
        matrix(f"blk.{i}.attn_q.weight", hidden, hidden, 0.15, q)
        matrix(f"blk.{i}.attn_k.weight", n_kv_heads * head_dim, hidden, 0.15, q)
        matrix(f"blk.{i}.attn_v.weight", n_kv_heads * head_dim, hidden, 0.15, q)
        matrix(f"blk.{i}.attn_output.weight", hidden, hidden, 0.1, q)
        vector(f"blk.{i}.ffn_norm.weight", hidden)
        matrix(f"blk.{i}.ffn_gate.weight", ffn, hidden, 0.15, q)
        matrix(f"blk.{i}.ffn_up.weight", ffn, hidden, 0.15, q)
        matrix(f"blk.{i}.ffn_down.weight", hidden, ffn, 0.1, q)
    vector("output_norm.weight", hidden)
    if not tied:
        matrix("output.weight", vocab, hidden, 0.5, embed_kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def tiny_folder_with_template(root: Path, template: str) -> Path:
    """The tiny model converted with room for tools (2048 positions, untied), `template` its
    only chat template (no chat_template.jinja beside the config)."""
    from chatapp.convert.converter import ConvertOptions, convert_gguf

    gguf_path = write_tiny_gguf(root / "tiny.gguf", tied=False, seed=2, context=2048)
    folder = convert_gguf(gguf_path, root / "model", ConvertOptions())
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = template
    config_path.write_text(json.dumps(config))
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    return folder
