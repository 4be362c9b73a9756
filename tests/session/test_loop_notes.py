"""The live panel's sentences come from the answer and the model, never from a guess."""

from __future__ import annotations

from chatapp.engine.figures import AnswerFigures
from chatapp.session.loop_notes import (
    LOOP_TIPS,
    LoadedDevice,
    answer_caption,
    naive_bytes_per_token,
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
    )
    note = transfer_note(fig, CPU)
    assert note.startswith("On CUDA GPU IO-Binding kept the KV cache on the device")
    assert "9.2 MB per token" in note and "(100 tokens in its KV cache)" in note
    assert "computer's memory" not in note


def test_the_cpu_note_says_why_the_cached_loops_are_close() -> None:
    fig = AnswerFigures(mode="naive", device="cpu", prompt_tokens=30, generated_tokens=20)
    note = transfer_note(fig, CPU)
    assert "stays in the computer's memory" in note and "noise" in note
    assert "4.6 MB per token" in note  # 2 x 46 080 B x 50 tokens
    # Another model's answer (from the history): no numbers from the loaded one's KV size.
    other = AnswerFigures(mode="naive", device="cpu", model="other", prompt_tokens=30)
    assert "MB" not in transfer_note(other, CPU)


def test_every_loop_has_a_plain_tip() -> None:
    assert set(LOOP_TIPS) == {"nocache", "naive", "iobinding"}
    for tip in LOOP_TIPS.values():
        assert "session.run" not in tip and "numpy" not in tip
