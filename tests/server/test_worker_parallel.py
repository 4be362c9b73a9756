"""`chatapp serve --parallel N` (server/worker.py): requests answered together, each on a
slot, each answer the one the engine gives that request alone (greedy; computed here, on this
machine)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chatapp.engine.chat import Message
from chatapp.engine.engine import Engine
from chatapp.engine.loops import Step
from chatapp.engine.sampling import GREEDY
from chatapp.engine.slots import SlotBatch
from tests.serving import Served, serving

QUESTIONS = [("hello", 20), ("tell me a long story about the sea", 9), ("hi", 14)]
WAIT_S = 60.0


@pytest.fixture(scope="module")
def parallel(varied_model_dir: Path) -> Iterator[Served]:
    with serving(Engine(varied_model_dir, threads=1, max_context=256), parallel=3) as s:
        yield s


def ask(served: Served, text: str, n: int, **extra: Any) -> httpx2.Response:
    body = {"messages": [{"role": "user", "content": text}], "temperature": 0, "max_tokens": n}
    return httpx2.post(
        f"{served.api}/chat/completions", json={**body, **extra}, timeout=60, trust_env=False
    )


def first_steps_together(batch: SlotBatch, count: int) -> threading.Barrier:
    """Hold each sequence's first decode step until `count` sequences have reached theirs, so
    those steps certainly run as one."""
    barrier = threading.Barrier(count, timeout=WAIT_S)
    original = batch.step
    seen: set[int] = set()

    def step(index: int, token: int) -> Step:
        if index not in seen:
            seen.add(index)
            barrier.wait()
        return original(index, token)

    batch.step = step  # type: ignore[method-assign]
    return barrier


def test_requests_answered_together_equal_their_solo_answers(
    parallel: Served, varied_model_dir: Path
) -> None:
    engine = parallel.worker.engine
    batch = engine.slots(3)
    models = httpx2.get(f"{parallel.api}/models", trust_env=False).json()
    assert models["data"][0]["chatapp"]["parallel"] == 3
    first_steps_together(batch, 3)
    replies: dict[int, httpx2.Response] = {}

    def client(i: int) -> None:
        text, n = QUESTIONS[i]
        replies[i] = ask(parallel, text, n)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    reference = Engine(varied_model_dir, threads=1, max_context=256)
    for i, (text, n) in enumerate(QUESTIONS):
        data = replies[i].json()
        gen = reference.chat([Message("user", text)], replace(GREEDY, max_new_tokens=n))
        gen.run()
        assert data["choices"][0]["message"]["content"] == gen.text
        assert data["usage"]["completion_tokens"] == n == gen.stats.generated_tokens
    assert batch.steps > 0 and batch.rows >= batch.steps + 2  # one step carried all three
    assert batch.busy == 0


def test_a_request_for_another_loop_runs_on_the_engines_own_cache(
    parallel: Served, varied_model_dir: Path
) -> None:
    """The slots decode on the IO-Binding loop; a request naming the naive loop (the window's
    loop switch on a remote model) runs alone on the engine's naive loop, with its tokens."""
    response = ask(parallel, "hello", 6, chatapp={"loop": "naive"})
    assert response.status_code == 200, response.text
    data = response.json()
    reference = Engine(varied_model_dir, threads=1, max_context=256)
    gen = reference.chat([Message("user", "hello")], replace(GREEDY, max_new_tokens=6))
    gen.run()
    assert data["choices"][0]["message"]["content"] == gen.text
    assert data["chatapp"]["loop"] == "naive"
    assert parallel.worker.engine.slots(3).busy == 0


def test_the_choices_of_one_request_decode_together(
    parallel: Served, varied_model_dir: Path
) -> None:
    batch = parallel.worker.engine.slots(3)
    steps, rows = batch.steps, batch.rows
    first_steps_together(batch, 3)  # would wait out WAIT_S unless the three choices run at once
    body = {"messages": [{"role": "user", "content": "tell me a long story about the sea"}]}
    body |= {"temperature": 0, "max_tokens": 11, "n": 3}
    data = httpx2.post(
        f"{parallel.api}/chat/completions", json=body, timeout=60, trust_env=False
    ).json()
    reference = Engine(varied_model_dir, threads=1, max_context=256)
    gen = reference.chat(
        [Message("user", "tell me a long story about the sea")], replace(GREEDY, max_new_tokens=11)
    )
    gen.run()
    assert [c["message"]["content"] for c in data["choices"]] == [gen.text] * 3
    assert data["usage"]["completion_tokens"] == 33
    assert batch.steps > steps and batch.rows - rows >= batch.steps - steps + 2
