"""The native kernels' library as the kernel tests use it: where it is, the instruction-set
paths this CPU can run, and a session on it (`conftest.py`'s `isa` fixture runs a test on each
path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import onnx
import onnxruntime as ort
import pytest

from chatapp.engine.native_kernels import library_isa, library_path

LIBRARY = library_path()
NOT_BUILT = pytest.mark.skipif(LIBRARY is None, reason="native kernels not built (make native)")
BEST = library_isa()
# every path this CPU can run: the forced ones, then the library's own choice when it is another
ISAS = (
    ["scalar"]
    + (["avx2"] if BEST in ("avx2", "avx512vnni") else [])
    + (["best"] if BEST == "avx512vnni" else [])
)

T = TypeVar("T")


def on_every_path(monkeypatch: pytest.MonkeyPatch, run: Callable[[], T]) -> list[T]:
    """`run`'s result on each instruction-set path of ISAS, in its order (the library reads
    CHATAPP_GGUF_ISA when a session registers it)."""
    results = []
    for path in ISAS:
        if path == "best":
            monkeypatch.delenv("CHATAPP_GGUF_ISA", raising=False)
        else:
            monkeypatch.setenv("CHATAPP_GGUF_ISA", path)
        results.append(run())
    return results


PRECISION_CONFIG = "chatapp.gguf.precision"


def session(
    model: onnx.ModelProto, threads: int = 2, precision: str = "exact"
) -> ort.InferenceSession:
    """A session on the library at `precision` ("exact": float32 prompts and int16 steps, what
    the tests written before the fast precision check; "fast": 8-bit activations)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry(PRECISION_CONFIG, precision)
    opts.register_custom_ops_library(str(LIBRARY))
    return ort.InferenceSession(
        model.SerializeToString(), sess_options=opts, providers=["CPUExecutionProvider"]
    )
