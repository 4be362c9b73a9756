"""Clients that send no `max_tokens` (the OpenAI SDK's and LangChain's default) are batched in
the default budget of one context: each request reserves its prompt and a piece of its answer
and grows; where the budget is full the youngest is pre-empted and computed again, and every
client still gets its solo answer (a native graph at the fast precision; the references are
computed here, at run time). The counters show it on /metrics and /slots."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import httpx2

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message
from tests.server.test_operators import parse
from tests.server.test_worker_parallel import (
    arriving_together,
    native_fast,  # noqa: F401 (a fixture)
)
from tests.serving import serving

CONTEXT = 256
WAIT_S = 120.0
TEXTS = ["hello", "tell me a story", "hi there", "what is the sea"]


def test_four_clients_without_max_tokens_are_batched_and_keep_their_solo_answers(
    native_fast: Path,  # noqa: F811
) -> None:
    engine = Engine(native_fast, threads=1, max_context=CONTEXT, precision="fast")
    references = []
    for text in TEXTS:  # what each gets alone, with the server's default limit (the context)
        gen = engine.chat([Message("user", text)], replace(GREEDY, max_new_tokens=CONTEXT))
        gen.run()
        references.append(gen.text)
        engine.reset()
    replies: dict[int, httpx2.Response] = {}
    with serving(engine, parallel=4) as served:
        batch = served.worker.slot_batch
        assert batch is not None and batch.budget == CONTEXT  # the default: one context
        # The four are admitted in one pass (whole-context reservations would admit one at a
        # time): they start together.
        arriving_together(served.worker, 4)

        def client(i: int) -> None:
            body = {"messages": [{"role": "user", "content": TEXTS[i]}], "temperature": 0}
            replies[i] = httpx2.post(
                f"{served.api}/chat/completions", json=body, timeout=WAIT_S, trust_env=False
            )

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S)
            assert not thread.is_alive(), "a client never got its answer"
        metrics = parse(httpx2.get(f"{served.url}/metrics", trust_env=False).text)
        slots = httpx2.get(f"{served.url}/slots", trust_env=False).json()
    for reply in replies.values():
        assert reply.status_code == 200, reply.text
    for i in range(4):
        assert replies[i].json()["choices"][0]["message"]["content"] == references[i]
    steps, rows = (
        metrics[("chatapp_batched_steps_total", "")],
        metrics[("chatapp_batched_rows_total", "")],
    )
    # Steps carried several clients (one at a time: rows == steps), at first all four: each
    # answer here runs to the end of the context (the tiny model never ends), so after their
    # first pieces they take turns, pre-empted.
    assert rows > steps and batch.widest == 4
    assert batch.preemptions > 0
    assert metrics[("chatapp_preemptions_total", "")] == batch.preemptions
    assert metrics[("chatapp_kv_tokens_capacity", "")] == CONTEXT
    assert metrics[("chatapp_kv_tokens_reserved", "")] == 0  # nothing runs now
    assert all(view["reserved_tokens"] == 0 and not view["preempted"] for view in slots)
