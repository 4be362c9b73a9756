"""server/request_body.py: `n` and `logit_bias` read from request bodies (no engine)."""

from __future__ import annotations

from typing import Any

import pytest

from chatapp.server.errors import ApiError
from chatapp.server.request_body import (
    MAX_CHOICES,
    MAX_LOGIT_BIASES,
    parse_chat,
    parse_completion,
)

CHAT = {"messages": [{"role": "user", "content": "hi"}]}
VOCAB = 100


def chat(**fields: Any) -> Any:
    return parse_chat({**CHAT, **fields}, "iobinding", 512, vocab_size=VOCAB)


def refusal(**fields: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        chat(**fields)
    assert caught.value.status == 400 and "\n" not in caught.value.message
    return caught.value


def test_n_choices_each_sample_with_a_seed_of_their_own() -> None:
    request = chat(n=3, seed=2**63 - 2, temperature=0.8)
    choices = request.choices()
    assert request.n == 3 and [c.n for c in choices] == [1, 1, 1]
    # choice i: seed + i, wrapping at 2^63 (choice 0 is the answer n = 1 gives)
    assert [c.answer.settings.seed for c in choices] == [2**63 - 2, 2**63 - 1, 0]
    assert all(c.answer.settings.temperature == 0.8 for c in choices)
    unseeded = chat(n=2).choices()
    assert [c.answer.settings.seed for c in unseeded] == [None, None]
    assert chat().choices() == [chat()]
    completion = parse_completion({"prompt": "a", "n": 2}, "iobinding", 512)
    assert completion.n == 2 and len(completion.choices()) == 2


@pytest.mark.parametrize("n", [0, MAX_CHOICES + 1, 2.0, True, "2"])
def test_n_is_bounded(n: Any) -> None:
    error = refusal(n=n)
    assert error.param == "n" and f"from 1 to {MAX_CHOICES}" in error.message


def test_logit_bias_becomes_the_samplers_pairs() -> None:
    settings = chat(logit_bias={"5": -100, "7": 2.5, "0": 100}).answer.settings
    assert settings.logit_bias == ((5, -100.0), (7, 2.5), (0, 100.0))
    assert chat(logit_bias={}).answer.settings.logit_bias == ()
    assert chat().answer.settings.logit_bias == ()


@pytest.mark.parametrize(
    ("bias", "words"),
    [
        ([[5, -100]], "must be an object"),
        ({"-1": 1}, "not a token id"),
        ({"five": 1}, "not a token id"),
        ({str(VOCAB): 1}, f"from 0 to {VOCAB - 1}"),
        ({"5": 100.5}, "from -100"),
        ({"5": "ban"}, "from -100"),
        ({"5": True}, "from -100"),
        ({str(i): 1 for i in range(MAX_LOGIT_BIASES + 1)}, f"at most {MAX_LOGIT_BIASES}"),
    ],
)
def test_bad_logit_bias_is_a_400_in_words(bias: Any, words: str) -> None:
    error = refusal(logit_bias=bias)
    assert error.param == "logit_bias" and words in error.message


def test_logit_bias_on_completions_too() -> None:
    request = parse_completion({"prompt": "a", "logit_bias": {"3": -100}}, "iobinding", 512)
    assert request.answer.settings.logit_bias == ((3, -100.0),)


def test_the_penalty_looks_at_the_whole_sequence_unless_repeat_last_n_says() -> None:
    """repetition_penalty keeps vLLM's meaning (all tokens), as the window and `generate`;
    llama.cpp's repeat_last_n picks the latest ones."""
    assert chat(repetition_penalty=1.2).answer.settings.penalty_last_n == -1
    assert chat(repetition_penalty=1.2, repeat_last_n=64).answer.settings.penalty_last_n == 64
    assert chat(repeat_last_n=0).answer.settings.penalty_last_n == 0
    for bad in (-2, 1.5, True, "64", 1 << 25):
        assert refusal(repeat_last_n=bad).param == "repeat_last_n"
