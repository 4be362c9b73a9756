"""server/responses.py over HTTP: `n` choices, whole and streamed, chat and completions
(references computed here by the engine, on this machine)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message
from tests.server.test_app import QUESTION, post, stream_chunks
from tests.serving import Served, serving


def test_greedy_choices_are_each_the_solo_answer(served: Served, reference: Engine) -> None:
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 9, "n": 3, "logprobs": True}
    data = post(served, "chat/completions", body).json()
    gen = reference.chat([Message("user", "hello")], replace(GREEDY, max_new_tokens=9))
    gen.run()
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    for choice in data["choices"]:
        assert choice["message"]["content"] == gen.text
        assert choice["finish_reason"] == "length" and len(choice["logprobs"]["content"]) == 9
    assert data["usage"] == {  # the prompt once, the tokens of every choice
        "prompt_tokens": gen.stats.prompt_tokens,
        "completion_tokens": 27,
        "total_tokens": gen.stats.prompt_tokens + 27,
    }


def test_sampled_choice_i_is_the_answer_to_seed_plus_i(served: Served) -> None:
    body = {"messages": QUESTION, "temperature": 1.5, "top_k": 0, "max_tokens": 12, "seed": 40}
    texts = [
        c["message"]["content"]
        for c in post(served, "chat/completions", {**body, "n": 3}).json()["choices"]
    ]
    alone = [
        post(served, "chat/completions", {**body, "seed": 40 + i}).json()["choices"][0]["message"][
            "content"
        ]
        for i in range(3)
    ]
    assert texts == alone
    assert len(set(texts)) > 1  # each choice its own draw (three seeds, 12 tokens at 1.5)


def test_a_stream_of_choices_ends_each_and_counts_them_all(served: Served) -> None:
    body = {"messages": QUESTION, "temperature": 0, "max_tokens": 6, "n": 2}
    whole = post(served, "chat/completions", body).json()
    chunks = stream_chunks(
        served, "chat/completions", {**body, "stream_options": {"include_usage": True}}
    )
    assert chunks[-1] == "[DONE]"
    usage = chunks[-2]
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    events = [c["choices"][0] for c in chunks[:-2]]
    assert len({c["id"] for c in chunks[:-1]}) == 1  # one id for every choice
    for index in (0, 1):
        mine = [e for e in events if e["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        text = "".join(e["delta"].get("content", "") for e in mine)
        assert text == whole["choices"][index]["message"]["content"]
        finishes = [e["finish_reason"] for e in mine if e["finish_reason"]]
        assert finishes == ["length"]


def test_completions_make_n_choices_too(served: Served) -> None:
    body: dict[str, Any] = {"prompt": "in the", "temperature": 0, "max_tokens": 5, "n": 2}
    data = post(served, "completions", body).json()
    assert [c["index"] for c in data["choices"]] == [0, 1]
    assert data["choices"][0]["text"] == data["choices"][1]["text"]
    assert data["usage"]["completion_tokens"] == 10
    chunks = stream_chunks(served, "completions", body)
    for index in (0, 1):
        text = "".join(
            c["choices"][0]["text"] for c in chunks[:-1] if c["choices"][0]["index"] == index
        )
        assert text == data["choices"][index]["text"]


def test_the_openai_sdk_reads_the_choices(client: Any, model: str) -> None:
    openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")
    answer = client.chat.completions.create(
        model=model, messages=QUESTION, n=2, max_tokens=4, temperature=0
    )
    assert [c.index for c in answer.choices] == [0, 1]
    assert answer.choices[0].message.content == answer.choices[1].message.content
    with pytest.raises(openai.BadRequestError, match="from 1 to 8"):
        client.chat.completions.create(model=model, messages=QUESTION, n=9)


def test_more_choices_than_the_queue_holds_is_a_400(varied_model_dir: Path) -> None:
    with serving(Engine(varied_model_dir, threads=1), max_queue=2) as small:
        response = post(small, "chat/completions", {"messages": QUESTION, "n": 3})
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["param"] == "n" and "--max-queue" in error["message"]
        two = post(small, "chat/completions", {"messages": QUESTION, "n": 2, "max_tokens": 2})
        assert two.status_code == 200 and len(two.json()["choices"]) == 2
        small.wait_until(lambda: small.worker.pending == 0)  # the 400 left nothing queued
