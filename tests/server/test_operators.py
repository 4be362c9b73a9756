"""The operators' endpoints: /health's state, /metrics in Prometheus' text format, /slots."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from chatapp.engine.engine import Engine
from chatapp.engine.slots import slots_refusal
from chatapp.server.app import build_app
from chatapp.server.operators import Load, ServerCounters
from chatapp.server.worker import EngineWorker
from tests.serving import Served, serving, slow_down

QUESTION = [{"role": "user", "content": "hello"}]
SAMPLE = re.compile(r"^([a-z_]+)(?:\{(.*)\})? (\S+)$")


def scrape(served: Served) -> dict[tuple[str, str], float]:
    """Every sample of /metrics as {(name, labels): value}, checking the format's shape."""
    response = httpx2.get(f"{served.url}/metrics", timeout=30, trust_env=False)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def parse(text: str) -> dict[tuple[str, str], float]:
    samples: dict[tuple[str, str], float] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("#") or not line:
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        assert name in typed, f"{name} has no # TYPE line before it"
        samples[(name, labels or "")] = float(value)
    return samples


def ask(served: Served, max_tokens: int, **extra: Any) -> httpx2.Response:
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": max_tokens, **extra}
    return httpx2.post(f"{served.api}/chat/completions", json=body, timeout=60, trust_env=False)


def test_metrics_count_what_the_answers_said(tiny_model_dir: Path) -> None:
    with serving(Engine(tiny_model_dir, threads=1)) as served:
        before = scrape(served)
        answers = [ask(served, 4).json() for _ in range(2)]
        refused = ask(served, 0)  # max_tokens 0: the request's own fault
        after = scrape(served)
    assert refused.status_code == 400
    prompt = sum(a["usage"]["prompt_tokens"] for a in answers)
    generated = sum(a["usage"]["completion_tokens"] for a in answers)
    assert before[("chatapp_generated_tokens_total", "")] == 0
    assert after[("chatapp_prompt_tokens_total", "")] == prompt
    assert after[("chatapp_generated_tokens_total", "")] == generated
    finishes = [a["choices"][0]["finish_reason"] for a in answers]
    for finish in set(finishes):
        assert after[("chatapp_requests_total", f'finish="{finish}"')] == finishes.count(finish)
    assert after[("chatapp_errors_total", 'status="400",type="invalid_request_error"')] == 1
    assert after[("chatapp_prompt_seconds_total", "")] > 0
    assert after[("chatapp_requests_waiting", "")] == 0
    assert after[("chatapp_requests_running", "")] == 0
    assert after[("chatapp_slots_total", "")] == 1
    # The iobinding loop's cache holds the last conversation; one context was allocated.
    assert 0 < after[("chatapp_kv_tokens_used", "")] <= after[("chatapp_kv_tokens_capacity", "")]


def test_health_and_slots_while_a_request_runs(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    gate = threading.Event()
    restore = slow_down(engine, 0.0, gate)
    try:
        with serving(engine) as served:
            idle = httpx2.get(f"{served.url}/health", trust_env=False).json()
            runner = threading.Thread(target=ask, args=(served, 5))
            runner.start()
            served.wait_until(lambda: served.worker.running is not None)
            busy = httpx2.get(f"{served.url}/health", trust_env=False).json()
            slots = httpx2.get(f"{served.url}/slots", trust_env=False).json()
            asked = httpx2.get(f"{served.url}/slots?prompts=1", trust_env=False).json()
            metrics = scrape(served)
            gate.set()
            runner.join(60)
            after = httpx2.get(f"{served.url}/health", trust_env=False).json()
    finally:
        gate.set()
        restore()
    assert idle["state"] == "ready" and busy["state"] == "busy" and after["state"] == "ready"
    assert len(slots) == 1 and slots[0]["is_processing"]
    request = slots[0]["request"]
    assert request["max_tokens"] == 5 and "prompt" not in request
    assert asked[0]["request"]["prompt"] == QUESTION
    assert metrics[("chatapp_requests_running", "")] == 1
    assert metrics[("chatapp_slots_busy", "")] == 1


def test_parallel_slots_show_their_caches(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    refusal = slots_refusal(engine.info, engine.device)
    if refusal is not None:
        pytest.skip(refusal)
    with serving(engine, parallel=2) as served:
        answer = ask(served, 3).json()
        slots = httpx2.get(f"{served.url}/slots", trust_env=False).json()
        metrics = scrape(served)
    assert [s["id"] for s in slots] == [0, 1]
    assert not any(s["is_processing"] for s in slots)
    used = sum(s["cached_tokens"] for s in slots)
    usage = answer["usage"]
    # The slot that answered keeps the prompt and the answer's tokens but the last.
    assert used == usage["prompt_tokens"] + usage["completion_tokens"] - 1
    assert metrics[("chatapp_kv_tokens_used", "")] == used
    # Both slots draw on one budget: a context's worth by default.
    assert metrics[("chatapp_kv_tokens_capacity", "")] == slots[0]["n_ctx"]
    assert metrics[("chatapp_slots_total", "")] == 2
    assert metrics[("chatapp_prompt_tokens_shared_total", "")] == 0  # one request: nothing shared


def test_slots_answer_only_on_this_machine(tiny_model_dir: Path) -> None:
    worker = EngineWorker(Engine(tiny_model_dir, threads=1), "iobinding")
    try:
        # Starlette's test client comes from the host "testclient": not a loopback address.
        with TestClient(build_app(worker), base_url="http://localhost") as client:
            refused = client.get("/slots")
            assert client.get("/metrics").status_code == 200
    finally:
        worker.close()
    assert refused.status_code == 403 and "localhost" in refused.json()["error"]["message"]


def test_the_text_format_escapes_and_sums() -> None:
    counters = ServerCounters()
    counters.answered("stop", 10, 5, 0.25, 0.5, 0.0)
    counters.answered("stop", 3, 2, 0.25, 0.25, 1.0)
    counters.ended_early("cancelled", 1)
    counters.error(503, 'server "busy"\n')
    samples = parse(counters.render(Load(2, 1, 1, 7, 512)))
    assert samples[("chatapp_requests_total", 'finish="stop"')] == 2
    assert samples[("chatapp_requests_total", 'finish="cancelled"')] == 1
    assert samples[("chatapp_generated_tokens_total", "")] == 8
    assert samples[("chatapp_decode_seconds_total", "")] == 0.75
    assert samples[("chatapp_errors_total", 'status="503",type="server \\"busy\\"\\n"')] == 1
    assert samples[("chatapp_requests_waiting", "")] == 2
    assert Load(0, 1, 1, 0, 0).state == "busy" and Load(3, 1, 2, 0, 0).state == "ready"
