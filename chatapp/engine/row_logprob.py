"""log p(token) of each generated token, over vocabularies of up to 262k logits.

The side panel's perplexity needs every token's log-probability, so every step takes the log of
the sum of exp over the whole row of logits. numpy's float32 exp took 0.67 ms over Gemma 3's
262,144 logits (3% of a decode step, work llama.cpp does not do); ONNX Runtime's LogSoftmax
(MLAS's vectorized exp) takes 0.17 ms into a buffer bound once. numpy stays the fallback for
rows the session cannot take (other types, a session that could not be made).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from chatapp.engine.sampling import log_softmax_at

INPUT, OUTPUT = "logits", "logprobs"


@lru_cache(maxsize=1)
def log_softmax_session() -> ort.InferenceSession | None:
    """One LogSoftmax over a [1, vocab] row for every model of the process (made once: the
    engine asks at load time so that no answer's first token waits for it)."""
    row = ["one", "vocab"]
    graph = helper.make_graph(
        [helper.make_node("LogSoftmax", [INPUT], [OUTPUT], axis=-1)],
        "row_log_softmax",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, row)],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, row)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    # One thread: no pool of its own whose idle spinning would compete with the model's.
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(
            model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
        )
    except Exception:  # a broken onnxruntime install: numpy still answers
        return None


class RowLogProb:
    """log p(token) under softmax(row) for one generation's rows of `vocab` float32 logits."""

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab
        self._scratch = np.empty(vocab, dtype=np.float32)  # the result, or numpy's exp
        self._session = log_softmax_session() if vocab > 0 else None
        self._binding: ort.IOBinding | None = None
        if self._session is not None:
            self._binding = self._session.io_binding()
            out = self._scratch.reshape(1, vocab)
            self._binding.bind_output(
                OUTPUT, "cpu", 0, np.float32, list(out.shape), out.ctypes.data
            )

    def __call__(self, logits: np.ndarray, token: int) -> float:
        row = logits.reshape(-1) if logits.ndim != 1 else logits
        usable = (
            self._binding is not None
            and row.dtype == np.float32
            and row.size == self.vocab
            and row.flags.c_contiguous
            and 0 <= token < self.vocab
        )
        if not usable:
            return log_softmax_at(row, token, self._scratch if row.size == self.vocab else None)
        assert self._session is not None and self._binding is not None
        try:
            self._binding.bind_cpu_input(INPUT, row.reshape(1, self.vocab))
            self._session.run_with_iobinding(self._binding)
        except Exception:  # the figure is not worth an answer: numpy from now on
            self._binding = None
            return log_softmax_at(row, token, self._scratch)
        return float(self._scratch[token])
