"""Graph nodes for the native kernels: projections on raw GGUF blocks (docs/converter.md,
"Native kernels").

`chatapp convert --native` keeps every projection whose format has a kernel (gguf_blocks.py) as
its GGUF bytes and multiplies it with `chatapp.gguf.GgufMatMul`, one node for steps and prompts
alike (the operator picks its integer path for one row and its float path for more); the token
embedding is `GgufGather` on its own bytes (shared with a tied output projection). Such a graph
needs the library at run time (chatapp/engine/native_kernels.py) and runs on the CPU only.
"""

from __future__ import annotations

import onnx
from onnx import helper

from chatapp.convert.gguf_blocks import NATIVE_DOMAIN, NATIVE_GATHER, NATIVE_OP, GgufWeight
from chatapp.convert.onnx_graph import OnnxGraph
from chatapp.folder_format.graph import all_nodes, declares_native


def native_matmul(g: OnnxGraph, x: str, w: GgufWeight, name: str) -> str:
    """x [.., K] @ w^T -> [.., N] on the weight's own GGUF blocks."""
    raw = g.const(f"{name}.gguf_{w.qtype.lower()}", w.raw)
    return g.op1(NATIVE_OP, [x, raw], domain=NATIVE_DOMAIN, qtype=w.qtype, K=w.k, N=w.n)


def native_gather(g: OnnxGraph, ids: str, w: GgufWeight) -> str:
    """float32 [..., K] rows of w for `ids`, dequantized from the same bytes the (tied) output
    projection reads: one copy in the folder."""
    raw = g.const(f"embed.gguf_{w.qtype.lower()}", w.raw)
    return g.op1(NATIVE_GATHER, [raw, ids], domain=NATIVE_DOMAIN, qtype=w.qtype, K=w.k, N=w.n)


def declare_native_domain(model: onnx.ModelProto) -> bool:
    """Add the custom domain to the model's opsets when a node uses it; True if one does."""
    if not any(node.domain == NATIVE_DOMAIN for node in all_nodes(model.graph)):
        return False
    if not declares_native(model):
        model.opset_import.append(helper.make_opsetid(NATIVE_DOMAIN, 1))
    return True
