"""The live figures show one answer at a time, labelled with its loop and device, with the
words of that device; a device's warm-up is a phase of its own."""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import QLabel, QWidget

from chatapp.engine.figures import AnswerFigures
from chatapp.engine.warm_up import WarmUpProgress
from chatapp.gui.chat.live_figures import WrappedNote
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.session import formatting as fmt
from chatapp.session.loop_notes import LOOP_TIPS, naive_bytes_per_token
from chatapp.units import fmt_bytes

KV_PER_TOKEN = 46_080  # a small model: 30 layers x 3 KV heads x 64 x K and V x 4 bytes
WEBGPU_NAIVE = AnswerFigures(
    mode="naive",
    device="webgpu-software",
    tokens_per_s=1.3,
    ttft_s=6.551,
    generated_tokens=40,
    prompt_tokens=60,
    context_length=8192,
    h2d_bytes_per_token=4.4e6,
    d2h_bytes_per_token=4.4e6,
)
CPU_IOBINDING = AnswerFigures(
    mode="iobinding", device="cpu", tokens_per_s=24.8, ttft_s=0.12, generated_tokens=20,
    prompt_tokens=30, context_length=8192, h2d_bytes_per_token=0, d2h_bytes_per_token=0,
    finish_reason="length",
)  # fmt: skip


def make_panel(qtbot) -> SidePanel:
    panel = SidePanel()
    qtbot.addWidget(panel)
    panel.set_device_memory(True, "WebGPU software adapter", KV_PER_TOKEN, "webgpu-software")
    panel.show()
    return panel


def test_switching_device_keeps_the_answer_s_figures_and_words_together(qtbot) -> None:
    panel = make_panel(qtbot)
    panel.begin_answer()
    assert panel.figures_box.answer_label.text().startswith("This answer:")
    panel.finish_answer(WEBGPU_NAIVE)
    shown = (
        panel.figures_box.tokens_per_second_value.text(),
        panel.figures_box.transfer_value.text(),
    )
    assert shown == ("1.3", "8.8 MB")
    note = panel.figures_box.transfer_note.text()
    assert "naive loop" in note and "8.8 MB" in note
    # Back to the CPU: the WebGPU answer stays as it was, never with the CPU's explanation.
    panel.set_device_memory(False, "CPU", KV_PER_TOKEN, "cpu")
    assert (
        panel.figures_box.tokens_per_second_value.text(),
        panel.figures_box.transfer_value.text(),
    ) == shown
    assert panel.figures_box.answer_label.text() == "Last answer: Naive · WebGPU (software)"
    assert panel.figures_box.transfer_note.text() == note
    # The next answer is the CPU's, labelled so, with the CPU's words.
    panel.begin_answer()
    assert panel.figures_box.tokens_per_second_value.text() == fmt.MISSING
    assert panel.figures_box.answer_label.text() == "This answer: IO-Binding · CPU"
    panel.finish_answer(CPU_IOBINDING)
    assert panel.figures_box.transfer_value.text() == "0 B"
    cpu_note = panel.figures_box.transfer_note.text()
    assert "stays in the computer's memory" in cpu_note and "noise" in cpu_note
    # 30 + 20 tokens, the last one written at the limit but never read back: 49 in the cache.
    assert fmt_bytes(naive_bytes_per_token(KV_PER_TOKEN, 49)) in cpu_note
    assert "(49 tokens in its KV cache)" in cpu_note


def test_a_remote_answer_is_labelled_with_the_server_s_model(qtbot) -> None:
    panel = make_panel(qtbot)
    remote = AnswerFigures(mode="remote", device="remote", model="SmolLM2", tokens_per_s=40.0)
    panel.show_stats(remote)
    assert panel.figures_box.answer_label.text() == "Last answer: remote · SmolLM2"
    assert "server" in panel.figures_box.transfer_note.text()


def test_warm_up_is_its_own_phase_and_named_beside_the_answer(qtbot) -> None:
    panel = make_panel(qtbot)
    box = panel.figures_box
    panel.begin_answer()
    panel.show_warm_up(WarmUpProgress(0, 2, 0.0))
    assert box.warming_up and box.warm_up_bar.isVisible()
    assert "Preparing the device" in box.warm_up_note.text()
    assert "first answer only" in box.warm_up_note.text()
    panel.show_warm_up(WarmUpProgress(1, 2, 7.0))
    assert box.warm_up_bar.value() == 1
    panel.show_warm_up(WarmUpProgress(2, 2, 11.25))
    assert not box.warming_up and not box.warm_up_bar.isVisible()
    assert "11.2 s" in box.warm_up_note.text() and "not counted" in box.warm_up_note.text()
    panel.finish_answer(WEBGPU_NAIVE)
    assert box.warm_up_note.isVisible()  # beside the answer it preceded
    panel.begin_answer()
    assert not box.warm_up_note.isVisible()  # the next answer had none


def test_the_toggle_s_tips_are_plain_words(qtbot) -> None:
    panel = make_panel(qtbot)
    for button in (panel.loop_toggle.naive_button, panel.loop_toggle.iobinding_button):
        tip = button.toolTip()
        assert tip in LOOP_TIPS.values()
        assert "session.run" not in tip and "numpy" not in tip


def test_an_answer_stopped_during_its_warm_up_leaves_no_warm_up_note(qtbot) -> None:
    panel = make_panel(qtbot)
    panel.begin_answer()
    panel.show_warm_up(WarmUpProgress(0, 2, 0.0))
    panel.finish_answer(None)  # the job was stopped before the first token
    box = panel.figures_box
    assert not box.warming_up and not box.warm_up_note.isVisible()
    assert not box.warm_up_bar.isVisible()


SEVEN_TOKENS = AnswerFigures(
    mode="iobinding", device="cpu", tokens_per_s=48.7, ttft_s=0.23, perplexity=1.45,
    prompt_perplexity=1.64e27, prompt_tokens=37, reused_tokens=0, generated_tokens=7,
    context_length=8192, finish_reason="eos", h2d_bytes_per_token=0, d2h_bytes_per_token=0,
)  # fmt: skip


def _answer(panel: SidePanel, fig: AnswerFigures, latencies: list[float]) -> None:
    panel.begin_answer()
    panel.add_latencies(0, latencies)
    panel.show_stats(fig)
    panel.finish_answer(fig)


def test_the_chart_says_which_tokens_it_holds(qtbot) -> None:
    panel = make_panel(qtbot)
    _answer(panel, SEVEN_TOKENS, [0.23] + [0.02] * 6)
    box = panel.figures_box
    # 7 tokens, 6 points: token 1's time is the TTFT, and the caption says so.
    assert box.latency_chart.point_count == 6
    assert [p.x() for p in box.latency_chart.series.points()] == [2, 3, 4, 5, 6, 7]
    assert box.latency_caption.text().endswith(
        "tokens 2–7 of the 7 written (token 1's is the TTFT)"
    )
    assert box.latency_chart.series.pointsVisible()  # few enough to count


def test_counts_agree_and_the_context_note_says_why_they_differ(qtbot) -> None:
    panel = make_panel(qtbot)
    panel.set_device_memory(False, "CPU", KV_PER_TOKEN, "cpu")
    _answer(panel, SEVEN_TOKENS, [0.23] + [0.02] * 6)
    box = panel.figures_box
    assert not box.notes.isVisible()  # folded under "Notes on these figures" at first
    box.notes_section.set_open(True)
    assert panel.figures_box.context_value.text() == "44 / 8192"
    assert "(44 tokens in its KV cache)" in panel.figures_box.transfer_note.text()
    assert not box.context_note.isVisible()
    # The window measures the next question's prompt: 50 beside 44, with the reason.
    panel.set_context(50, 8192)
    assert box.context_note.isVisible()
    assert box.context_note.text().startswith("50: the conversation as the next question")
    assert "the 44 tokens in the last answer's KV cache" in box.context_note.text()
    panel.begin_answer()
    assert not box.context_note.isVisible()


def test_absurd_perplexity_reads_as_words_and_a_reused_prompt_is_said(qtbot) -> None:
    panel = make_panel(qtbot)
    _answer(panel, SEVEN_TOKENS, [0.23])
    box = panel.figures_box
    box.notes_section.set_open(True)
    assert panel.figures_box.prompt_perplexity_value.text() == "> 1,000"
    assert "very unlikely" in panel.figures_box.prompt_perplexity_value.toolTip()
    assert "equally likely" in panel.figures_box.perplexity_value.toolTip()
    assert not box.prompt_note.isVisible()
    reused = replace(SEVEN_TOKENS, reused_tokens=36, prompt_perplexity=None, ttft_s=0.025)
    _answer(panel, reused, [0.025])
    assert box.prompt_note.isVisible()
    assert "Prompt reused from the cache: only 1 new token was read" in box.prompt_note.text()
    assert panel.figures_box.prompt_perplexity_value.text() == fmt.MISSING
    assert "Too few new tokens" in box.prompt_note.text()


def test_the_note_explains_the_loop_chosen_and_the_loop_that_ran(qtbot) -> None:
    panel = make_panel(qtbot)
    panel.set_device_memory(False, "CPU", KV_PER_TOKEN, "cpu")
    notes = {}
    for mode in ("nocache", "naive", "iobinding"):
        panel.set_mode(mode)
        notes[mode] = panel.figures_box.transfer_note.text()
    assert len(set(notes.values())) == 3 and "no KV cache" in notes["nocache"]
    panel.set_mode("nocache")
    _answer(panel, replace(SEVEN_TOKENS, mode="nocache"), [0.23] + [0.02] * 6)
    note = panel.figures_box.transfer_note.text()
    assert note.startswith("No cache keeps no notes") and "tokens in its KV cache" not in note


def test_a_note_laid_out_narrow_first_takes_only_the_height_it_needs_once_wider(qtbot) -> None:
    """A folded section's first layout gives its notes a narrow width: the height they needed
    there must not stay once they are wider (a 240 px gap under the notes did)."""

    host = QWidget()
    qtbot.addWidget(host)
    note = WrappedNote("note", host)
    note.setText("IO-Binding keeps the KV cache where the model runs and updates it. " * 4)
    host.resize(400, 600)
    host.show()
    note.resize(100, 30)
    narrow = note.minimumHeight()
    note.resize(300, narrow)
    assert note.minimumHeight() < narrow
    probe = QLabel(note.text())
    probe.setWordWrap(True)
    assert note.minimumHeight() == probe.heightForWidth(300)
