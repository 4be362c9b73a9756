"""The official `openai` Python client against `chatapp serve`: a client nobody here wrote."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY
from chatapp.engine.text.chat import Message
from tests.serving import serving, slow_down

openai = pytest.importorskip("openai", reason="the openai package is in the dev extra")

HELLO = [{"role": "user", "content": "hello"}]


def expected_text(reference: Engine, n: int) -> str:
    gen = reference.chat([Message("user", "hello")], replace(GREEDY, max_new_tokens=n))
    gen.run()
    return gen.text


def test_models_and_a_whole_answer(client: openai.OpenAI, reference: Engine) -> None:
    (model,) = client.models.list().data
    answer = client.chat.completions.create(
        model=model.id, messages=HELLO, temperature=0, max_tokens=10
    )
    assert answer.choices[0].message.content == expected_text(reference, 10)
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 10
    figures = answer.model_extra["chatapp"]  # the extension field survives the client
    assert figures["loop"] == "iobinding" and figures["generated_tokens"] == 10


def test_streamed_answer_with_usage_and_the_loop_chosen(
    client: openai.OpenAI, reference: Engine
) -> None:
    stream = client.chat.completions.create(
        model="varied-llama",
        messages=HELLO,
        temperature=0,
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"chatapp": {"loop": "naive"}},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected_text(reference, 10)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["length"]
    assert finals[0].model_extra["chatapp"]["loop"] == "naive"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 10


def test_logprobs_through_the_client(client: openai.OpenAI, reference: Engine) -> None:
    answer = client.chat.completions.create(
        model="varied-llama",
        messages=HELLO,
        temperature=0,
        max_tokens=6,
        logprobs=True,
        top_logprobs=2,
    )
    gen = reference.chat([Message("user", "hello")], replace(GREEDY, max_new_tokens=6))
    gen.run()
    content = answer.choices[0].logprobs.content
    assert [t.logprob for t in content] == pytest.approx(gen.stats.logprobs, abs=1e-5)
    assert all(len(t.top_logprobs) == 2 and t.bytes is not None for t in content)
    legacy = client.completions.create(
        model="varied-llama", prompt="the", temperature=0, max_tokens=4, logprobs=1
    )
    assert len(legacy.choices[0].logprobs.token_logprobs) == len(legacy.choices[0].logprobs.tokens)


def test_bad_settings_raise_the_clients_bad_request_error(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="temperature must be a number"):
        client.chat.completions.create(model="varied-llama", messages=HELLO, temperature=5)
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.models.retrieve("gpt-4o")
    other = client.chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=2)
    assert other.model == "varied-llama"  # any name is answered by the one model served


def test_closing_the_stream_cancels_the_generation(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    restore = slow_down(engine, 0.01)
    try:
        with (
            serving(engine) as served,
            openai.OpenAI(base_url=served.api, api_key="x", max_retries=0) as c,
        ):
            stream = c.chat.completions.create(
                model="tiny-llama", messages=HELLO, max_tokens=400, stream=True
            )
            received = [next(iter(stream)) for _ in range(3)]
            stream.close()
            (record,) = served.wait_for_records(1)
    finally:
        restore()
    assert len(received) == 3
    assert record.cancelled and record.engine_finish_reason == "stop"
    assert record.generated_tokens < 400
