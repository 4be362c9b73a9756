"""`chatapp serve --parallel N` (server/worker.py): requests answered together, each on a
slot, each answer the one the engine gives that request alone (greedy; computed here, on this
machine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx2
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message
from chatapp.folder_format.native_library import usable_isa
from chatapp.server.worker import EngineWorker
from chatapp.session.jobs import Job, JobControl
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


def arriving_together(worker: EngineWorker, count: int) -> None:
    """Hold the engine's thread (a job) until `count` more requests are queued behind it: the
    batch's loop then admits them in one pass, so their first steps certainly run as one."""
    service = worker._service

    def hold(_control: JobControl) -> None:
        deadline = time.monotonic() + WAIT_S
        while service.queued < count and time.monotonic() < deadline:
            time.sleep(0.002)

    service.submit(Job("hold", hold))


def test_requests_answered_together_equal_their_solo_answers(
    parallel: Served, varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three clients at once, each on its own HTTP thread: their answers are their solo ones,
    their steps ran as one, and every run of the model ran on the engine service's one thread
    (no slot threads)."""
    engine = parallel.worker.engine
    batch = engine.slots(3)
    models = httpx2.get(f"{parallel.api}/models", trust_env=False).json()
    assert models["data"][0]["chatapp"]["parallel"] == 3
    arriving_together(parallel.worker, 3)
    runs_on: set[str] = set()
    run = engine.session.run_with_iobinding

    def recorded(*args: Any) -> Any:
        runs_on.add(threading.current_thread().name)
        return run(*args)

    monkeypatch.setattr(engine.session, "run_with_iobinding", recorded)
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
    assert batch.widest == 3 and batch.busy == 0
    assert runs_on == {parallel.worker._service.name}


def test_a_client_that_leaves_does_not_disturb_the_others(
    varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three clients decode together; one closes its stream after two tokens: its answer stops
    within a pass, its slot is freed, and the two others get their solo answers."""
    engine = Engine(varied_model_dir, threads=1, max_context=256)
    with serving(engine, parallel=3) as served:
        batch = engine.slots(3)
        run = batch._run

        def slow(pending: dict[int, int]) -> Any:  # steps last long enough to leave midway
            time.sleep(0.01)
            return run(pending)

        monkeypatch.setattr(batch, "_run", slow)
        arriving_together(served.worker, 3)
        replies: dict[int, httpx2.Response] = {}

        def stay(i: int) -> None:
            replies[i] = ask(served, QUESTIONS[i][0], 30)

        def leave() -> None:
            body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}
            body |= {"max_tokens": 200, "stream": True}
            url = f"{served.api}/chat/completions"
            with httpx2.stream("POST", url, json=body, timeout=60, trust_env=False) as response:
                events = httpx2.EventSource(response).__iter__()
                for _ in range(3):  # the role chunk and two tokens
                    next(events)

        threads = [threading.Thread(target=stay, args=(i,)) for i in range(2)]
        threads.append(threading.Thread(target=leave))
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        records = served.wait_for_records(3)
    reference = Engine(varied_model_dir, threads=1, max_context=256)
    for i in range(2):
        gen = reference.chat([Message("user", QUESTIONS[i][0])], replace(GREEDY, max_new_tokens=30))
        gen.run()
        assert replies[i].json()["choices"][0]["message"]["content"] == gen.text
    (left,) = [r for r in records if r.cancelled]
    assert left.engine_finish_reason == "stop" and 2 <= left.generated_tokens < 200
    assert batch.widest == 3 and batch.busy == 0


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
    arriving_together(parallel.worker, 1)  # the three choices are one request
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


@pytest.fixture(scope="module")
def native_fast(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not usable_isa():
        pytest.skip("native kernels not built here")
    out = tmp_path_factory.mktemp("parallel-native") / "m"
    return convert_gguf(varied_gguf, out, ConvertOptions(graph="native"))


def test_choices_prefill_their_prompt_once_and_each_is_its_seeds_solo_answer(
    native_fast: Path,
) -> None:
    """Issue 49: the first choice prefills the prompt, the others (admitted after it by the
    batch's loop) copy its KV (no prefill of their own); on a native graph at the fast
    precision each choice still is, bit for bit, the answer to seed + i asked alone (whose
    prompt then comes from a cache)."""
    text = "tell me a long story about the sea and the ships on it, " * 3
    body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "max_tokens": 8}
    body |= {"temperature": 1.0, "top_k": 0, "seed": 11, "logprobs": True}

    def answers(served: Served, **extra: Any) -> tuple[list[tuple[str, list[float]]], int]:
        data = httpx2.post(
            f"{served.api}/chat/completions", json=body | extra, timeout=60, trust_env=False
        ).json()
        choices = [
            (c["message"]["content"], [t["logprob"] for t in c["logprobs"]["content"]])
            for c in data["choices"]
        ]
        return choices, data["usage"]["prompt_tokens"]

    engine = Engine(native_fast, threads=1, max_context=256, precision="fast")
    with serving(engine, parallel=3) as served:
        batch = served.worker.engine.slots(3)
        choices, prompt = answers(served, n=3)
        assert batch.shared_positions == 2 * (prompt - 1)  # two choices copied, none prefilled
        alone = [answers(served, seed=11 + i)[0][0] for i in range(3)]
    assert choices == alone
    assert len({text for text, _ in choices}) > 1  # three draws


def _completion(served: Served, seed: int) -> tuple[tuple[str, list[float]], int]:
    """(text, token log-probs) of a seeded temperature-1 completion, and its reused tokens."""
    body = {"prompt": "I believe the meaning of life is", "max_tokens": 10, "seed": seed}
    body |= {"temperature": 1.0, "top_k": 0, "logprobs": 1}
    response = httpx2.post(f"{served.api}/completions", json=body, timeout=60, trust_env=False)
    assert response.status_code == 200, response.text
    data = response.json()
    choice = data["choices"][0]
    answer = (choice["text"], choice["logprobs"]["token_logprobs"])
    return answer, data["chatapp"]["reused_tokens"]


@pytest.mark.parametrize("slots", [1, 2])
def test_llama_cpp_seed_checks_hold_fresh_reused_and_side_by_side(
    native_fast: Path, slots: int
) -> None:
    """llama.cpp's server seed checks (test_consistent_result_same_seed and
    test_different_result_different_seed, with 1 and 2 slots), stricter: the log-probs too.
    On a native graph at the fast precision a seeded temperature-1 completion is the same
    four times running (the first fresh, the others with the prompt from a cache), and the
    same again for two clients sending it at once (one copies the other's prompt, then they
    decode together); other seeds draw other answers."""
    engine = Engine(native_fast, threads=1, max_context=256, precision="fast")
    with serving(engine, parallel=slots) as served:
        runs = [_completion(served, 42) for _ in range(4)]
        together: dict[int, tuple[str, list[float]]] = {}

        def client(i: int) -> None:
            together[i] = _completion(served, 42)[0]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        others = [_completion(served, seed)[0] for seed in range(4)]
    first, reused = runs[0]
    assert reused == 0  # a fresh server: the first prompt is computed whole
    assert all(r > 0 for _, r in runs[1:])  # the later ones start from a cache
    assert [answer for answer, _ in runs] == [first] * 4
    assert [together[0], together[1]] == [first, first]
    assert len({text for text, _ in others}) > 1
