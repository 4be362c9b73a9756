"""llama.cpp's logits of the fidelity windows, in a process of its own (scripts/fidelity.py).

Run by any Python that has llama-cpp-python (it imports nothing from chatapp):

    PYTHON scripts/fidelity_llamacpp.py GGUF OUT.npy THREADS < windows.json

stdin: {"windows": [[ids of one window], ...], "first": the first scored position, "last": one
past the last}. Each window is evaluated on a fresh cache as one batch with every position's
logits kept (logits_all=True, as llama.cpp's perplexity tool reads them); OUT.npy gets the scored
rows of every window, float32 [windows, scored, vocab].
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    try:
        import llama_cpp
        import numpy as np
    except ImportError as exc:
        print(f"llama-cpp-python is not installed in {sys.executable} ({exc})", file=sys.stderr)
        return 2
    gguf, out, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    request = json.load(sys.stdin)
    windows, first, last = request["windows"], request["first"], request["last"]
    size = max(len(w) for w in windows)
    llm = llama_cpp.Llama(
        model_path=gguf,
        n_ctx=size,
        n_batch=size,
        n_ubatch=size,
        n_threads=threads,
        n_threads_batch=threads,
        logits_all=True,
        verbose=False,
    )
    rows = []
    for ids in windows:
        llm.reset()
        llm.eval(ids)
        rows.append(np.array(llm.scores[first:last], dtype=np.float32))
    np.save(out, np.stack(rows))
    print(json.dumps({"version": llama_cpp.__version__, "windows": len(rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
