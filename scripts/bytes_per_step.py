"""Bytes a decode step reads, per GGUF tensor type: chatapp's folder against the GGUF (the floor).

    .venv/bin/python scripts/bytes_per_step.py [--shape 300m] [--types Q4_0,Q4_K_M,...]
    .venv/bin/python scripts/bytes_per_step.py --gguf FILE.gguf --folder CONVERTED

Without --gguf, writes a random-weight GGUF of each llama.cpp preset in a real model's shape
(scripts/shaped_gguf.py), converts it with the defaults, and prints, per GGUF type, the bytes one
decode step reads in the GGUF (llama.cpp reads the file's own blocks) and in the folder (every
initializer a one-token run uses, one row of a gathered embedding:
chatapp/engine/bench/floor.py), then the totals and both files' sizes. Folder initializers are
matched to GGUF tensors by the projection names the converter gives them (fused q/k/v and gate/up
split by rows); what matches no tensor (RoPE tables, shape constants) is "other".
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import gguf

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, Path(__file__).resolve().parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import numpy as np  # noqa: E402

from chatapp.convert.converter import ConvertOptions, convert_gguf  # noqa: E402
from chatapp.engine.bench import floor  # noqa: E402

PRESETS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_XS")
# ONNX projection name -> the GGUF roles it holds (fused ones hold several).
ROLES = {
    "attn.q": ("attn_q",),
    "attn.k": ("attn_k",),
    "attn.v": ("attn_v",),
    "attn.qkv": ("attn_q", "attn_k", "attn_v"),
    "attn.o_proj": ("attn_output",),
    "mlp.gate": ("ffn_gate",),
    "mlp.up": ("ffn_up",),
    "mlp.gate_up": ("ffn_gate", "ffn_up"),
    "mlp.down": ("ffn_down",),
    "input_layernorm": ("attn_norm",),
    "post_attention_layernorm": ("ffn_norm",),
}
LAYER = re.compile(r"^layers\.(\d+)\.([a-z_]+(?:\.[a-z_]+)?)\.")


def gguf_tensors(onnx_name: str, tensors: dict[str, tuple[str, int]]) -> list[str]:
    """The GGUF tensors an initializer of the folder stands for (empty: none of them)."""
    if onnx_name.startswith("embed."):
        return ["token_embd.weight"]
    if onnx_name.startswith("lm_head."):
        return ["output.weight" if "output.weight" in tensors else "token_embd.weight"]
    if onnx_name.startswith("final_norm."):
        return ["output_norm.weight"]
    match = LAYER.match(onnx_name)
    if match is None:
        return []
    layer, projection = match.groups()
    return [f"blk.{layer}.{role}.weight" for role in ROLES.get(projection, ())]


def by_type(gguf: Path, model: Path) -> dict[str, tuple[int, int]]:
    """GGUF type -> (GGUF bytes per step, folder bytes per step); "other" for the rest."""
    tensors = floor.gguf_step_bytes(gguf)
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for qtype, size in tensors.values():
        table[qtype][0] += size
    for name, size in floor.onnx_step_bytes(model).items():
        parts = [t for t in gguf_tensors(name, tensors) if t in tensors]
        if not parts:
            table["other"][1] += size
            continue
        # Fused rows: each part's share of the GGUF bytes stands in for its share of the rows.
        whole = sum(tensors[t][1] for t in parts) or 1
        for t in parts:
            table[tensors[t][0]][1] += size * tensors[t][1] // whole
    return {k: (v[0], v[1]) for k, v in table.items()}


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("model.onnx*"))


def report(label: str, gguf: Path, folder: Path) -> list[str]:
    table = by_type(gguf, folder / "model.onnx")
    lines = [f"### {label}", "", "| GGUF type | GGUF MB/step | folder MB/step | ratio |"]
    lines.append("|---|---:|---:|---:|")
    for qtype, (theirs, ours) in sorted(table.items(), key=lambda kv: -kv[1][0]):
        ratio = f"{ours / theirs:.2f}x" if theirs else "-"
        lines.append(f"| {qtype} | {theirs / 1e6:.2f} | {ours / 1e6:.2f} | {ratio} |")
    theirs = sum(v[0] for v in table.values())
    ours = sum(v[1] for v in table.values())
    lines.append(
        f"| **total** | **{theirs / 1e6:.2f}** | **{ours / 1e6:.2f}** | **{ours / theirs:.2f}x** |"
    )
    size, their_size = folder_bytes(folder), gguf.stat().st_size
    lines += [
        "",
        f"files: folder {size / 1e6:.1f} MB, GGUF {their_size / 1e6:.1f} MB "
        f"({size / their_size:.2f}x)",
        "",
    ]
    return lines


def vary_block_scales(shaped: Any) -> None:
    """Give each block of shaped_gguf's files its own scale (and minimum), as real files have.

    shaped_gguf writes one scale for every block; the converter then stores equal scale
    tensors once for all layers, which would count them once per step instead of per layer.
    """
    original = shaped.random_blocks

    def random_blocks(rng: np.random.Generator, qtype: Any, rows: int, cols: int) -> np.ndarray:
        blocks = original(rng, qtype, rows, cols)
        layout = shaped.LAYOUTS[qtype]
        size = blocks.shape[1] // (cols // gguf.GGML_QUANT_SIZES[qtype][0])
        flat = blocks.reshape(-1, size)
        for at, value in ((layout.scale_at, layout.scale), (layout.min_at, layout.min_value)):
            if at is not None:
                varied = (value * rng.uniform(0.5, 1.5, len(flat))).astype(np.float16)
                flat[:, at : at + 2] = varied.view(np.uint8).reshape(-1, 2)
        return blocks

    shaped.random_blocks = random_blocks


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--shape", default="300m", help="a shape of scripts/shaped_gguf.py")
    parser.add_argument("--types", default=",".join(PRESETS))
    parser.add_argument("--gguf", type=Path, help="measure this file (with --folder) instead")
    parser.add_argument("--folder", type=Path, help="the folder converted from --gguf")
    args = parser.parse_args()
    if args.gguf is not None:
        folder = args.folder
        if folder is None:
            parser.error("--gguf needs --folder (the conversion to compare)")
        print("\n".join(report(args.gguf.name, args.gguf, folder)))
        return
    import shaped_gguf  # scripts/shaped_gguf.py

    vary_block_scales(shaped_gguf)
    shape = shaped_gguf.SHAPES[args.shape]
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.types.split(","):
            gguf = Path(tmp) / f"{args.shape}-{preset}.gguf"
            shaped_gguf.write_shaped_gguf(gguf, shape, preset)
            folder = convert_gguf(gguf, Path(tmp) / preset, ConvertOptions())
            print("\n".join(report(f"{shape.name}, {preset}", gguf, folder)), flush=True)
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
            gguf.unlink()


if __name__ == "__main__":
    main()
