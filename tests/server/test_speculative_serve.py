"""`chatapp serve --speculative`: each request drafts from its own conversation, the answers
are those without it, and /metrics counts the drafted and kept tokens."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.native_kernels import library_path
from tests.server.test_operators import scrape
from tests.serving import Served, serving

BUILT = pytest.mark.skipif(library_path() is None, reason="native kernels not built (make native)")
REPEATING = "abc abc abc abc abc abc abc abc abc abc"


@pytest.fixture(scope="module")
def native_model_dir(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("speculative-serve")
    return convert_gguf(tiny_gguf, root / "tiny", ConvertOptions(graph="native"))


def answer(served: Served, seed: int | None = None) -> str:
    body = {
        "messages": [{"role": "user", "content": REPEATING}],
        "max_tokens": 40,
        "temperature": 0 if seed is None else 1,
        **({"seed": seed} if seed is not None else {}),
    }
    response = httpx2.post(f"{served.api}/chat/completions", json=body, timeout=60, trust_env=False)
    assert response.status_code == 200, response.text
    return str(response.json()["choices"][0]["message"]["content"])


@BUILT
def test_drafting_keeps_the_answers_and_is_counted(native_model_dir: Path) -> None:
    engine = Engine(native_model_dir, threads=1, precision="fast")
    with serving(engine) as served:
        plain = [answer(served), answer(served, seed=3)]
        engine.speculative = True
        drafted = [answer(served), answer(served, seed=3)]
        samples = scrape(served)
    assert drafted == plain
    kept = samples[("chatapp_accepted_tokens_total", "")]
    assert samples[("chatapp_drafted_tokens_total", "")] >= kept > 0
