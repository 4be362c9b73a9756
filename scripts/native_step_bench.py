"""Decode-step and prompt cost of the native GGUF kernels (native/), one operator at a time.

Runs chatapp.gguf.GgufMatMul on --rows activation rows (1: a decode step; more: a prompt) for the
matrices of a model shape (random, well-formed GGUF blocks), each library given with --lib in its
own session, interleaved round by round; prints the minimum of the rounds (robust to a busy
machine) per matrix, the per-token (or per-prompt) sum for the shape, and the GB/s that sum reads.
Example:

    PYTHONPATH=. .venv/bin/python scripts/native_step_bench.py \
        --lib native/build/libchatapp_gguf.so --lib /tmp/old.so --shape 1b --threads 1 --cpu
    PYTHONPATH=. .venv/bin/python scripts/native_step_bench.py --rows 42 --calls 1 ...
    PYTHONPATH=. .venv/bin/python scripts/native_step_bench.py --rows 4 --step-rows ...

--step-rows feeds the rows as [rows, 1, K], a decode step of that many sequences (engine/slots.py).

A --lib of PATH@fast or PATH@exact asks for that precision (CHATAPP_GGUF_PRECISION; fast: 8-bit
activations, the default), PATH@int16 for the exact precision with int16 prompts
(CHATAPP_GGUF_PROMPT); the same library may be given several times with different suffixes.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from chatapp.convert.gguf_blocks import NATIVE_DOMAIN, NATIVE_FORMATS, NATIVE_OP

SPIN_SETTLE_S = 0.05


@dataclass(frozen=True)
class Matrix:
    name: str
    qtype: str
    n: int
    k: int
    per_token: int  # how many of it a decode step multiplies by


SHAPES: dict[str, list[Matrix]] = {
    # TinyLlama-1.1B, llama.cpp's Q4_K_M mix (10 of 22 layers have Q6_K attn_v and ffn_down)
    "1b": [
        Matrix("q+k+v (Q4_K)", "Q4_K", 2048 + 256 + 256, 2048, 12),
        Matrix("q+k (Q4_K)", "Q4_K", 2048 + 256, 2048, 10),
        Matrix("v (Q6_K)", "Q6_K", 256, 2048, 10),
        Matrix("o (Q4_K)", "Q4_K", 2048, 2048, 22),
        Matrix("gate+up (Q4_K)", "Q4_K", 2 * 5632, 2048, 22),
        Matrix("down (Q4_K)", "Q4_K", 2048, 5632, 12),
        Matrix("down (Q6_K)", "Q6_K", 2048, 5632, 10),
        Matrix("output (Q6_K)", "Q6_K", 32000, 2048, 1),
    ],
    # Gemma-3-270M, llama.cpp's Q4_K_M mix for rows of 640 (scripts/shaped_gguf.py gemma3-270m)
    "gemma": [
        Matrix("q (Q5_0)", "Q5_0", 1024, 640, 18),
        Matrix("k (Q5_0)", "Q5_0", 256, 640, 18),
        Matrix("v (Q5_0)", "Q5_0", 256, 640, 9),
        Matrix("v (Q8_0)", "Q8_0", 256, 640, 9),
        Matrix("o (Q4_K)", "Q4_K", 640, 1024, 18),
        Matrix("gate+up (Q5_0)", "Q5_0", 2 * 2048, 640, 18),
        Matrix("down (Q4_K)", "Q4_K", 640, 2048, 9),
        Matrix("down (Q6_K)", "Q6_K", 640, 2048, 9),
        Matrix("output (Q8_0)", "Q8_0", 262144, 640, 1),
    ],
    # One 4096 x 640 matrix (cache-resident: the kernels' own cost) in each 32-wide format
    "formats": [
        Matrix(f"4096x640 ({q})", q, 4096, 640, 1) for q in ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")
    ],
    # One 1024 x 2048 matrix (cache-resident) in each 256-wide format
    "kformats": [
        Matrix(f"1024x2048 ({q})", q, 1024, 2048, 1) for q in ("Q4_K", "Q5_K", "Q6_K", "IQ4_XS")
    ],
    # Matrices larger than the last-level cache (the weights stream from memory, as in a model)
    "stream": [
        Matrix("57344x2048 (Q4_K)", "Q4_K", 57344, 2048, 1),
        Matrix("32000x2048 (Q6_K)", "Q6_K", 32000, 2048, 1),
        Matrix("131072x576 (Q4_1)", "Q4_1", 131072, 576, 1),
    ],
    # SmolLM2-135M, the default model: Q4_1 layers, tied Q8_0 head
    "default": [
        Matrix("q+k+v (Q4_1)", "Q4_1", 576 + 192 + 192, 576, 30),
        Matrix("o (Q4_1)", "Q4_1", 576, 576, 30),
        Matrix("gate+up (Q4_1)", "Q4_1", 2 * 1536, 576, 30),
        Matrix("down (Q4_1)", "Q4_1", 576, 1536, 30),
        Matrix("output (Q8_0)", "Q8_0", 49152, 576, 1),
    ],
}


def random_blocks(qtype: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes with small finite fp16 scales where each format keeps them."""
    values, size = NATIVE_FORMATS[qtype]
    raw = rng.integers(0, 256, size=(n * k // values, size), dtype=np.uint8)
    scale_at = {"Q4_K": (0, 2), "Q6_K": (208,), "Q4_1": (0, 2), "Q8_0": (0,)}.get(qtype, (0,))
    for at in scale_at:
        half = np.asarray(rng.uniform(1e-3, 1e-2, size=raw.shape[0]), dtype=np.float16)
        raw[:, at : at + 2] = half.view(np.uint8).reshape(-1, 2)
    return raw.reshape(n, -1)


def session(
    lib: str, m: Matrix, raw: np.ndarray, threads: int, shape: list[int]
) -> ort.InferenceSession:
    node = helper.make_node(
        NATIVE_OP, ["x", "w"], ["y"], domain=NATIVE_DOMAIN, qtype=m.qtype, K=m.k, N=m.n
    )
    graph = helper.make_graph(
        [node],
        "step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(raw, "w")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(NATIVE_DOMAIN, 1)]
    )
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    path, _, mode = lib.partition("@")
    # read as the session registers the library
    os.environ["CHATAPP_GGUF_PRECISION"] = "fast" if mode in ("", "fast") else "exact"
    os.environ["CHATAPP_GGUF_PROMPT"] = "int16" if mode == "int16" else "float"
    opts.register_custom_ops_library(path)
    return ort.InferenceSession(
        model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib", action="append", required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=5, help="calls per round (timed together)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--rows", type=int, default=1, help="activation rows per call (1: a step; more: a prompt)"
    )
    parser.add_argument("--only", default="", help="only the shape's matrices whose name has this")
    parser.add_argument(
        "--step-rows",
        action="store_true",
        help="feed the rows as [rows, 1, K]: one decode step of `rows` sequences (engine/slots.py) "
        "instead of a prompt",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="time the process's CPU time instead of wall time (with --threads 1: the kernel's "
        "own cost, less disturbed by neighbours taking the cores)",
    )
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    matrices = [m for m in SHAPES[args.shape] if args.only in m.name]
    sessions = []
    for m in matrices:
        raw = random_blocks(m.qtype, m.n, m.k, rng)
        shape = [args.rows, 1, m.k] if args.step_rows else [args.rows, m.k]
        x = {"x": rng.normal(size=shape).astype(np.float32)}
        sessions.append([(session(lib, m, raw, args.threads, shape), x) for lib in args.lib])
    clock = time.process_time if args.cpu else time.perf_counter
    best = np.full((len(matrices), len(args.lib)), np.inf)
    for _ in range(args.rounds):
        for i, per_lib in enumerate(sessions):
            for j, (sess, feed) in enumerate(per_lib):
                sess.run(None, feed)
                start = clock()
                for _ in range(args.calls):
                    sess.run(None, feed)
                best[i, j] = min(best[i, j], (clock() - start) / args.calls)
                # The pool's worker spins about 26 ms after a run before it sleeps (ONNX
                # Runtime: 2^20 pauses); without this wait the sessions just timed spun on the
                # cores the next one needed (a 178 MB head read 39 ms on two threads, 22 on one).
                time.sleep(SPIN_SETTLE_S)
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    kind = "CPU time" if args.cpu else "wall time"
    print(
        f"threads {args.threads}, {args.rows} {'step ' if args.step_rows else ''}rows, {kind}, "
        f"min of {args.rounds} rounds x {args.calls} calls, load {load}"
    )
    header = "".join(f"{'lib ' + str(j):>12}" for j in range(len(args.lib)))
    print(f"{'matrix':<18}{'x':>4}{header}   (us per call)")
    for i, m in enumerate(matrices):
        cells = "".join(f"{best[i, j] * 1e6:>12.0f}" for j in range(len(args.lib)))
        print(f"{m.name:<18}{m.per_token:>4}{cells}")
    counts = np.array([m.per_token for m in matrices], dtype=np.float64)
    nbytes = sum(
        m.per_token * m.n * m.k // NATIVE_FORMATS[m.qtype][0] * NATIVE_FORMATS[m.qtype][1]
        for m in matrices
    )
    for j, lib in enumerate(args.lib):
        total = float(counts @ best[:, j])
        per = (
            "token"
            if args.rows == 1
            else f"{args.rows}-sequence step"
            if args.step_rows
            else f"{args.rows}-row prompt"
        )
        print(f"lib {j}: {total * 1e3:.2f} ms per {per}, {nbytes / total / 1e9:.1f} GB/s  {lib}")


if __name__ == "__main__":
    main()
