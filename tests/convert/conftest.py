from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.convert.native_library import ISAS


@pytest.fixture(params=ISAS)
def isa(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each instruction-set path of the native kernels: the library reads CHATAPP_GGUF_ISA when
    a session registers it."""
    if request.param in ("scalar", "avx2"):
        monkeypatch.setenv("CHATAPP_GGUF_ISA", request.param)
    else:
        monkeypatch.delenv("CHATAPP_GGUF_ISA", raising=False)
    yield request.param


@pytest.fixture(autouse=True)
def exact_precision_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """The converter's tests compare native graphs with the float64 reference and the stock
    graph at today's arithmetic ("exact"); the fast precision (8-bit activations, the library's
    default) is checked kernel by kernel in test_fast_kernels.py, whose sessions name their
    precision in the config entry, which wins over CHATAPP_GGUF_PRECISION."""
    monkeypatch.setenv("CHATAPP_GGUF_PRECISION", "exact")
