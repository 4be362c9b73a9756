"""The live panel's sentences come from the answer and the model, never from a guess."""

from __future__ import annotations

import pytest

from chatapp.engine.figures import AnswerFigures
from chatapp.session import formatting as fmt
from chatapp.session.loop_notes import (
    LOOP_TIPS,
    PERPLEXITY_TIP,
    LoadedDevice,
    answer_caption,
    context_note,
    naive_bytes_per_token,
    perplexity_meaning,
    prompt_note,
    transfer_note,
)

CPU = LoadedDevice("cpu", "CPU", False, 46_080, "SmolLM2")


def test_what_naive_moves_is_the_kv_cache_down_and_back_up() -> None:
    assert naive_bytes_per_token(46_080, 100) == 2 * 46_080 * 100
    assert naive_bytes_per_token(46_080, 0) == 0


def test_captions_name_one_answer_s_loop_and_device() -> None:
    assert answer_caption(None) == "No answer yet"
    fig = AnswerFigures(mode="naive", device="webgpu-software")
    assert answer_caption(fig) == "Last answer: Naive · WebGPU (software)"
    assert answer_caption(fig, writing=True).startswith("This answer:")
    remote = AnswerFigures(mode="remote", device="remote", model="qwen")
    assert answer_caption(remote) == "Last answer: remote · qwen"


def test_a_device_answer_keeps_its_device_s_words_whatever_is_loaded() -> None:
    fig = AnswerFigures(
        mode="iobinding",
        device="cuda",
        prompt_tokens=90,
        generated_tokens=10,
        h2d_bytes_per_token=900,
        d2h_bytes_per_token=196_608,
        finish_reason="eos",  # its last token was read back before the end: 100 in the cache
    )
    note = transfer_note(fig, CPU)
    assert note.startswith("On CUDA GPU IO-Binding kept the KV cache on the device")
    assert "9.2 MB per token" in note and "(100 tokens in its KV cache)" in note
    assert "computer's memory" not in note


def test_the_cpu_note_says_why_the_cached_loops_are_close() -> None:
    fig = AnswerFigures(
        mode="naive", device="cpu", prompt_tokens=30, generated_tokens=20, finish_reason="eos"
    )
    note = transfer_note(fig, CPU)
    assert note.startswith("Naive keeps the KV cache but copies it")
    assert "stays in the computer's memory" in note and "noise" in note
    assert "4.6 MB per token" in note  # 2 x 46 080 B x 50 tokens
    # Another model's answer (from the history): no numbers from the loaded one's KV size.
    other = AnswerFigures(mode="naive", device="cpu", model="other", prompt_tokens=30)
    assert "MB" not in transfer_note(other, CPU)


def test_every_loop_has_a_plain_tip() -> None:
    assert set(LOOP_TIPS) == {"nocache", "naive", "iobinding"}
    for tip in LOOP_TIPS.values():
        assert "session.run" not in tip and "numpy" not in tip


def _answer(mode: str, **more: object) -> AnswerFigures:
    base: dict[str, object] = {
        "mode": mode, "device": "cpu", "prompt_tokens": 37, "generated_tokens": 7,
        "finish_reason": "eos", "prompt_perplexity": 122.6,
    }  # fmt: skip
    return AnswerFigures(**{**base, **more})  # type: ignore[arg-type]


def test_each_loop_has_its_own_explanation_true_for_it() -> None:
    notes = {mode: transfer_note(_answer(mode), CPU) for mode in ("nocache", "naive", "iobinding")}
    assert len(set(notes.values())) == 3
    # No cache keeps no KV cache: its note never says it holds tokens in one.
    assert "tokens in its KV cache" not in notes["nocache"]
    assert notes["nocache"].startswith("No cache keeps no notes between tokens (no KV cache)")
    assert "(44 tokens for the last token of this answer)" in notes["nocache"]
    assert notes["naive"].startswith("Naive keeps the KV cache")
    assert notes["iobinding"].startswith("IO-Binding keeps the KV cache where the model runs")
    for mode in ("naive", "iobinding"):
        assert "(44 tokens in its KV cache)" in notes[mode]  # 37 + 7, ended on its own
    # Before any answer: the loop chosen for the next one.
    before = {m: transfer_note(None, CPU, m) for m in ("nocache", "naive", "iobinding")}
    assert len(set(before.values())) == 3
    assert "tokens in its KV cache" not in before["nocache"]
    gpu = LoadedDevice("cuda", "CUDA GPU", True, 46_080)
    assert transfer_note(None, gpu, "naive") != transfer_note(None, gpu, "iobinding")


@pytest.mark.parametrize(
    ("finish", "read"), [("eos", 44), ("length", 43), ("stop", 43), (None, 43)]
)
def test_the_tokens_in_the_cache_leave_out_a_last_token_never_read_back(
    finish: str | None, read: int
) -> None:
    fig = _answer("iobinding", finish_reason=finish)
    assert fig.tokens_read == read
    assert f"({read} tokens in its KV cache)" in transfer_note(fig, CPU)


def test_a_reused_prompt_is_said_to_be_reused() -> None:
    reused = _answer("iobinding", reused_tokens=36, prompt_perplexity=None, ttft_s=0.05)
    assert prompt_note(reused) == (
        "Prompt reused from the cache: only 1 new token was read (36 of 37 already in the "
        "cache from the previous answer), so the TTFT is short. Too few new tokens to score "
        "the prompt's perplexity."
    )
    assert "only 5 new tokens were read" in prompt_note(_answer("naive", reused_tokens=32))
    # An answer ended at its first token shows no TTFT: the note says nothing of one.
    empty = _answer("iobinding", reused_tokens=36, generated_tokens=0, ttft_s=0.0)
    assert prompt_note(empty) == (
        "Prompt reused from the cache: only 1 new token was read (36 of 37 already in the "
        "cache from the previous answer)."
    )
    assert prompt_note(_answer("iobinding", reused_tokens=0)) == ""
    assert prompt_note(None) == ""
    remote = AnswerFigures(mode="remote", device="remote", prompt_tokens=37)
    assert prompt_note(remote) == ""


def test_context_used_and_the_answer_s_count_agree_or_say_why() -> None:
    fig = _answer("iobinding")
    assert context_note(fig, 44) == ""  # the answer's own count: they agree
    assert context_note(fig, 44, writing=True) == ""
    # After the answer, Context used counts the next question's prompt: 50 beside 44 says why.
    note = context_note(fig, 50)
    assert note == (
        "50: the conversation as the next question will send it, the 44 tokens in the last "
        "answer's KV cache plus the chat template's marks around the turn."
    )
    cut = context_note(_answer("iobinding", finish_reason="length"), 50)
    assert "the 43 tokens in the last answer's KV cache" in cut and "not yet read back" in cut
    assert "KV cache" not in context_note(_answer("nocache"), 50)
    # Fewer: the oldest messages left out only where the count left them out.
    assert context_note(fig, 30, dropped=4) == (
        "30: the conversation as the next question will send it, the oldest 4 messages left "
        "out (the last answer had 44)."
    )
    kept = context_note(fig, 30)
    assert "left out" not in kept
    assert kept.endswith(
        "the last answer as the chat keeps it: fewer tokens than the 44 tokens "
        "in the last answer's KV cache."
    )
    # A tool call is shown as a call, not as the JSON the model wrote: more or fewer tokens.
    call = _answer("iobinding", finish_reason="tool_calls")
    for used in (30, 60):
        note = context_note(call, used)
        assert "the tool call as the chat shows it" in note and "left out" not in note
        assert "template's marks" not in note


def test_perplexity_reads_in_plain_words() -> None:
    assert "equally likely" in PERPLEXITY_TIP and "exp(mean NLL)" not in PERPLEXITY_TIP
    assert perplexity_meaning(None) == ""
    assert perplexity_meaning(1.02) == "1.02: the model was nearly certain of each token."
    assert "between about 123 equally likely tokens" in perplexity_meaning(122.58)
    absurd = 1.64e27
    assert fmt.perplexity(absurd) == "> 1,000"
    assert perplexity_meaning(absurd) == (
        "Over 1,000 (1.64e+27): the model found this text very unlikely."
    )
    assert fmt.perplexity(999.994) == "999.99"
