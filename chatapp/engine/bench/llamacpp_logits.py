"""llama.cpp's logits of the fidelity windows, in a process of its own (`chatapp bench
--fidelity --peer-python PY`, scripts/fidelity.py; `llama_logits` below starts it).

Run by any Python that has llama-cpp-python (the child part imports nothing from chatapp):

    PYTHON llamacpp_logits.py GGUF THREADS < request.json > logits.npy

stdin: {"windows": [[ids of one window], ...], "first": the first scored position, "last": one
past the last}. Each window is evaluated on a fresh cache as one batch with every position's
logits kept (logits_all=True, as llama.cpp's perplexity tool reads them); stdout gets the scored
rows of every window as one .npy array, float32 [windows, scored, vocab] (no file is written).
CHATAPP_LLAMA_EXTRA_BUFFERS=0 loads the weights without llama.cpp's extra buffer types (its AMX
and repacked layouts; the same Q8_K / Q8_0 activations): its AMX path crashed (SIGSEGV) on the
Sapphire Rapids virtual machine of 2026-12-08. CHATAPP_LLAMA_FLASH_ATTN=1 turns its flash
attention on (off by default in llama-cpp-python): the same 8-bit products, attention summed in
another order.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any


def llama_logits(
    python: str,
    gguf: str,
    windows: Sequence[Sequence[int]],
    first: int,
    last: int,
    threads: int,
) -> Any:
    """llama.cpp's logits of positions first..last-1 of every window, [windows, scored, vocab]
    (a numpy array); RuntimeError with llama.cpp's own words when the child fails."""
    import numpy as np

    request = {"windows": [list(w) for w in windows], "first": first, "last": last}
    done = subprocess.run(
        [python, __file__, gguf, str(threads)],
        input=json.dumps(request).encode(),
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        words = done.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(f"llama.cpp failed: {words[-1] if words else done.returncode}")
    return np.load(io.BytesIO(done.stdout))


def main() -> int:
    try:
        import llama_cpp
        import numpy as np
    except ImportError as exc:
        print(f"llama-cpp-python is not installed in {sys.executable} ({exc})", file=sys.stderr)
        return 2
    gguf, threads = sys.argv[1], int(sys.argv[2])
    if os.environ.get("CHATAPP_LLAMA_EXTRA_BUFFERS") == "0":
        defaults = llama_cpp.llama_cpp.llama_model_default_params

        def plain_buffers() -> Any:
            params = defaults()
            params.use_extra_bufts = False
            return params

        llama_cpp.llama_cpp.llama_model_default_params = plain_buffers
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
        flash_attn=os.environ.get("CHATAPP_LLAMA_FLASH_ATTN") == "1",
        verbose=False,
    )
    rows = []
    for ids in windows:
        llm.reset()
        llm.eval(ids)
        rows.append(np.array(llm.scores[first:last], dtype=np.float32))
    out = io.BytesIO()
    np.save(out, np.stack(rows))
    sys.stdout.buffer.write(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
