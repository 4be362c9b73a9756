"""An independent greedy loop over a plain onnxruntime.InferenceSession (no chatapp code).

It feeds a model folder's graph what Optimum's `ORTModelForCausalLM` feeds it (input_ids,
attention_mask, position_ids, the past keys and values, use_cache_branch) and takes the argmax,
so tests can compute on the running machine the tokens a variant's own runtime would give
there. Used where the arithmetic depends on the CPU (`cpu_dependent`): those tokens cannot be
stored (tests/fixtures/onnx_folders/*/expected.json says which variants they are).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx
import onnxruntime as ort

# Nodes whose results ONNX Runtime's CPU kernels compute differently by instruction set:
# activations quantized to int8 at run time and summed by integer kernels (AVX2 vpmaddubsw
# saturates int16 pairs, AVX-512 VNNI vpdpbusd does not; AMX tiles differ again).
DYNAMIC_INT8_OPS = frozenset(
    {"DynamicQuantizeLinear", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"}
)
INT8_ACCURACY = 4  # MatMulNBits accuracy_level 4: int8 activations (CompInt8)


def cpu_dependent(path: Path) -> str | None:
    """Why the greedy tokens of the graph at `path` depend on the CPU's kernels, or None when
    it is float arithmetic (kernels only reorder sums: stored tokens with wide margins hold)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    nodes = [*graph.node]
    for node in graph.node:  # Optimum's merged decoder keeps its layers in If branches
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes.extend(attr.g.node)
    for node in nodes:
        if node.op_type in DYNAMIC_INT8_OPS:
            return f"int8 activations quantized at run time ({node.op_type})"
        if node.op_type == "MatMulNBits":
            level = next((a.i for a in node.attribute if a.name == "accuracy_level"), 0)
            if level == INT8_ACCURACY:
                return "MatMulNBits with int8 activations (accuracy_level 4)"
    return None


def kv_shape(folder: Path) -> tuple[int, int]:
    """(KV heads, head size) from the folder's config.json or genai_config.json."""
    genai = folder / "genai_config.json"
    if genai.is_file():
        decoder = json.loads(genai.read_text(encoding="utf-8"))["model"]["decoder"]
        return int(decoder["num_key_value_heads"]), int(decoder["head_size"])
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    heads = int(config["num_attention_heads"])
    head_dim = config.get("head_dim") or int(config["hidden_size"]) // heads
    return int(config.get("num_key_value_heads", heads)), int(head_dim)


DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


class Greedy(NamedTuple):
    tokens: list[int]
    margins: list[float]  # each step's top logit minus the runner-up's


def greedy_tokens(
    folder: Path, variant: str, prompt: list[int], n: int, *, cache: bool = True
) -> Greedy:
    """n greedy tokens after `prompt`: with `cache`, the prompt in one run and then one token a
    run with the returned keys and values fed back (Optimum's loop); without, the whole
    sequence every run from an empty past (what chatapp's nocache loop computes)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(
        str(folder / variant), sess_options=opts, providers=["CPUExecutionProvider"]
    )
    inputs = {i.name: i for i in session.get_inputs()}
    past_names = [name for name in inputs if name.startswith("past_key_values.")]
    kv_heads, head_size = kv_shape(folder)
    empty = {
        name: np.zeros((1, kv_heads, 0, head_size), DTYPES[inputs[name].type])
        for name in past_names
    }
    outputs = ["logits", *(name.replace("past_key_values", "present") for name in past_names)]
    sequence = list(prompt)
    past, new = dict(empty), list(prompt)
    tokens: list[int] = []
    margins: list[float] = []
    for _ in range(n):
        start = len(sequence) - len(new)
        feeds: dict[str, np.ndarray] = {
            "input_ids": np.array([new], dtype=np.int64),
            "attention_mask": np.ones((1, len(sequence)), dtype=np.int64),
            **past,
        }
        if "position_ids" in inputs:
            feeds["position_ids"] = np.arange(start, len(sequence), dtype=np.int64)[None]
        if "use_cache_branch" in inputs:
            feeds["use_cache_branch"] = np.array([start > 0])
        logits, *present = session.run(outputs, feeds)
        row = np.asarray(logits, dtype=np.float32)[0, -1]
        tokens.append(int(row.argmax()))
        top2 = np.sort(row)[-2:]
        margins.append(float(top2[1] - top2[0]))
        sequence.append(tokens[-1])
        if cache:
            past, new = dict(zip(past_names, present, strict=True)), [tokens[-1]]
        else:
            past, new = dict(empty), list(sequence)
    return Greedy(tokens, margins)
