"""llama.cpp in a process of its own, for `chatapp bench --peer llamacpp`.

Run by any Python that has llama-cpp-python (it imports nothing from chatapp). Protocol, one
JSON object per line: the first line on stdin configures the model and the child answers
{"ready": ..., "version": ..., "omp": the OpenMP wait settings it got}; each later line
{"ids": [...], "n": N} is one greedy run of exactly N tokens on a cold cache, answered with its
timings. The parent measures nothing itself: its own load
would count against llama.cpp.
"""

from __future__ import annotations

import json
import os
import sys
import time

perf = time.perf_counter


def main() -> int:
    try:
        import llama_cpp
        import numpy as np
    except ImportError as exc:
        print(json.dumps({"error": f"llama-cpp-python is not installed here ({exc})"}), flush=True)
        return 2
    config = json.loads(sys.stdin.readline())
    llm = llama_cpp.Llama(
        model_path=config["gguf"],
        n_ctx=config["n_ctx"],
        n_threads=config["threads"],
        n_threads_batch=config["threads"],
        n_batch=512,
        flash_attn=True,  # with the default f16 KV cache
        logits_all=False,
        verbose=False,
    )
    vocab = llm.n_vocab()
    omp = {key: os.environ.get(key) for key in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    print(json.dumps({"ready": True, "version": llama_cpp.__version__, "omp": omp}), flush=True)

    def argmax() -> int:
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(vocab,))
        return int(logits.argmax())

    for line in sys.stdin:
        request = json.loads(line)
        llm.reset()
        started = perf()
        llm.eval(request["ids"])
        tokens = [argmax()]
        previous = perf()
        ttft = previous - started
        latencies = []
        while len(tokens) < request["n"]:
            llm.eval([tokens[-1]])
            tokens.append(argmax())
            now = perf()
            latencies.append(now - previous)
            previous = now
        print(
            json.dumps({"ttft_s": ttft, "latencies_s": latencies, "token_ids": tokens}), flush=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
