"""What a parallel loop of the native kernels costs beside the work it shares out.

    PYTHONPATH=. .venv/bin/python scripts/parallel_for_cost.py
        [--lib native/build/libchatapp_gguf.so] [--k 2048] [--rows 16,32,256,2048]
        [--nodes 50] [--rounds 60]

One graph of `--nodes` independent GgufMatMul nodes (Q4_K, random blocks, fast precision) on the
same [1, 1, K] input, each N = rows weight rows, run on one thread and on two, interleaved round
by round; printed: microseconds a node (the minimum over the rounds, robust to a busy machine).
16 rows are one task (run inline: no parallel loop), 32 rows two tasks on two threads; the
difference between one and two threads there is the dispatch of ONNX Runtime's parallel loop
(docs/engine.md, "Two threads on the 1.1B step"). A node's fixed cost on one thread is the
executor's and the kernel's call.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from native_step_bench import random_blocks

from chatapp.convert.gguf_blocks import NATIVE_DOMAIN, NATIVE_OP


def chain(k: int, n: int, nodes: int, raw: np.ndarray) -> bytes:
    made = [
        helper.make_node(
            NATIVE_OP, ["x", "w"], [f"y{i}"], domain=NATIVE_DOMAIN, qtype="Q4_K", K=k, N=n
        )
        for i in range(nodes)
    ]
    graph = helper.make_graph(
        made,
        "nodes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, k])],
        [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None) for i in range(nodes)],
        [numpy_helper.from_array(raw, "w")],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(NATIVE_DOMAIN, 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib", default="native/build/libchatapp_gguf.so")
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--rows", default="16,32,256,2048")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    os.environ["CHATAPP_GGUF_PRECISION"] = "fast"  # read as a session registers the library
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((1, 1, args.k)) * 1e-3).astype(np.float32)
    print(f"K {args.k}, {args.nodes} nodes, min of {args.rounds} rounds, load {os.getloadavg()}")
    for n in (int(r) for r in args.rows.split(",")):
        model = chain(args.k, n, args.nodes, random_blocks("Q4_K", n, args.k, rng))
        sessions = {}
        for threads in (1, 2):
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.register_custom_ops_library(args.lib)
            sessions[threads] = ort.InferenceSession(
                model, sess_options=opts, providers=["CPUExecutionProvider"]
            )
            sessions[threads].run(None, {"x": x})
        best = {1: float("inf"), 2: float("inf")}
        for _ in range(args.rounds):
            for threads, session in sessions.items():
                start = time.perf_counter()
                for _ in range(5):
                    session.run(None, {"x": x})
                took = (time.perf_counter() - start) / 5 / args.nodes * 1e6
                best[threads] = min(best[threads], took)
        print(f"N {n}: {best[1]:.2f} us a node on one thread, {best[2]:.2f} on two")


if __name__ == "__main__":
    main()
