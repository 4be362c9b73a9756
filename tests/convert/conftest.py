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
