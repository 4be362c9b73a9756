"""llama.cpp's CPU time per decode step on one thread: the peer figure beside
scripts/step_cpu_cost.py when the machine is too busy for wall-clock tokens/s.

One thread has no OpenMP barrier to spin on, so neighbours taking the cores cost it time slices
but not CPU time. Run with a Python that has llama-cpp-python (built for this CPU):

    /work/venvs/llama/bin/python scripts/llamacpp_step_cpu.py FILE.gguf [--steps 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from llama_cpp import Llama

PROMPT = b"Explain what a KV cache is in a few sentences. "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("gguf")
    parser.add_argument("--prompt", type=int, default=42, help="prompt tokens")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    # The context holds the prompt and the steps (at least 512, as before).
    context = max(512, args.prompt + args.steps + 8)
    llm = Llama(model_path=args.gguf, n_threads=1, n_threads_batch=1, n_ctx=context, verbose=False)
    prompt = llm.tokenize(PROMPT * (args.prompt // 8 + 1))[: args.prompt]
    for repeat in range(args.repeats):
        llm.reset()
        start = time.process_time()
        llm.eval(prompt)
        prompt_ms = (time.process_time() - start) * 1e3
        token = prompt[-1]
        steps = []
        for _ in range(args.steps):
            start = time.process_time()
            llm.eval([token])
            steps.append((time.process_time() - start) * 1e3)
            # The last row's logits (llm.scores is only filled with logits_all).
            last = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
            token = int(last.argmax())
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print(
            f"repeat {repeat + 1}: prompt {prompt_ms:.0f} CPU ms, step median "
            f"{statistics.median(steps):.1f} CPU ms (min {min(steps):.1f}), load {load}",
            flush=True,
        )


if __name__ == "__main__":
    main()
