"""The chat feature with a base model, stop strings, Continue, and which model said what
(the real window, offscreen, with the tiny models)."""

from __future__ import annotations

from pathlib import Path

from chatapp.engine.text.chat import STYLE_CONTINUE, STYLE_PLAIN_CHAT, STYLE_TEMPLATE
from chatapp.gui.chat.controller import State
from chatapp.gui.models.feature import ModelsFeature
from chatapp.session import prompt_style as ps
from chatapp.session.formatting import figures_line
from tests.gui.conftest import LOAD_TIMEOUT_MS, greedy, send_and_wait, set_sampling
from tests.tiny_model import write_tiny_gguf


def test_a_base_model_says_so_and_continues_text(
    qtbot, make_window, base_model_dir: Path, generate_requests
) -> None:
    window = make_window(["--model", str(base_model_dir)])
    assert window.banner.isVisible() and "base model" in window.banner.text()
    prompt = window.chat.side_panel.sampling_box.prompt
    assert prompt.choice() == ps.CONTINUE
    assert window.chat.chat_view.prompt_edit.placeholderText() == ps.CONTINUE_PLACEHOLDER
    assert window.chat.chat_view.transcript.placeholderText() == ps.CONTINUE_EMPTY_CHAT
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "The capital of France is")
    assert generate_requests[-1].prompt_style == STYLE_CONTINUE
    answer = window.chat.conversation.messages[-1]
    assert answer.figures is not None and answer.figures.model == "tiny-base"
    assert figures_line(answer.figures).startswith("tiny-base (model.onnx) · ")
    assert "tiny-base" in window.chat.chat_view.transcript.toPlainText()

    # Chat instead: plain User:/Assistant: lines, with the stops that end invented turns.
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CHAT))
    prompt.stops_edit.setText(r"END, \n\n")
    assert "Message the model" in window.chat.chat_view.prompt_edit.placeholderText()
    send_and_wait(qtbot, window, "And Italy?")
    request = generate_requests[-1]
    assert request.prompt_style == STYLE_PLAIN_CHAT
    assert request.stops[:2] == ("END", "\n\n") and "\nUser:" in request.stops


def test_continue_goes_on_with_an_answer_cut_at_the_limit(
    qtbot, make_window, varied_model_dir: Path, generate_requests
) -> None:
    window = make_window(["--model", str(varied_model_dir)])
    assert window.chat.side_panel.sampling_box.prompt.prompt_style() == STYLE_TEMPLATE
    set_sampling(window, greedy(3))
    send_and_wait(qtbot, window, "hello")
    first = window.chat.conversation.messages[-1]
    assert first.figures is not None
    button = window.chat.chat_view.continue_button
    if first.figures.finish_reason != "length":  # an early end on this machine's kernels
        assert button.isHidden()
        return
    assert not button.isHidden()
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=LOAD_TIMEOUT_MS
    ):
        button.click()
    qtbot.waitUntil(lambda: window.chat.controller.backend_session.state is State.READY)
    assert generate_requests[-1].continue_last
    messages = window.chat.conversation.messages
    assert len(messages) == 2 and messages[-1].content.startswith(first.content)
    assert len(messages[-1].content) > len(first.content)
    # The footer speaks of the whole answer and says what the continuation added and took.
    whole = messages[-1].figures
    assert whole is not None and whole.continued_tokens
    assert whole.generated_tokens == (first.figures.generated_tokens or 0) + whole.continued_tokens
    assert whole.ttft_s == first.figures.ttft_s
    footer = window.chat.chat_view.transcript.toPlainText().splitlines()[-1]
    assert f"TTFT {first.figures.ttft_s * 1000:.0f} ms" in footer
    assert f"continued: +{whole.continued_tokens} tokens, TTFT " in footer
    # The latency chart holds the continuation's steps only, and its caption says so.
    figures_box = window.chat.side_panel.figures_box
    steps = figures_box.latency_chart.point_count
    assert 0 < steps < whole.generated_tokens - 1
    caption = figures_box.latency_caption.text()
    assert caption.endswith(
        f"tokens 2–{steps + 1} of the {steps + 1} the last Continue wrote "
        "(its token 1's is its TTFT)"
    )


def test_another_model_starts_a_new_chat_and_says_so(
    qtbot, make_window, tiny_model_dir: Path, base_model_dir: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(2))
    send_and_wait(qtbot, window, "hello")
    assert window.chat.conversation.model == "tiny-llama"
    window.open_model(base_model_dir)
    qtbot.waitUntil(
        lambda: (
            window.chat.controller.backend_session.model is not None
            and window.chat.controller.backend_session.model.name == "tiny-base"
        ),
        timeout=LOAD_TIMEOUT_MS,
    )
    assert window.chat.conversation.messages == []
    assert "tiny-llama" in window.banner.text()
    assert "new chat" in window.banner.text()


def test_a_base_gguf_opened_says_so_the_moment_it_opens(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Issue 47: File > Open GGUF with a base model's file said nothing of its missing template
    until a restart or a Load. Converted, then opened: the banner says it at once."""
    window = make_window(["--model", str(tiny_model_dir)])
    assert "base model" not in window.banner.text()
    gguf = write_tiny_gguf(tmp_path / "tiny-base.gguf", chat_template=None)
    models = window.feature(ModelsFeature)
    assert models is not None and models.convert_and_open(gguf, tmp_path / "tiny-base")
    qtbot.waitUntil(
        lambda: (
            window.chat.controller.backend_session.model is not None
            and window.chat.controller.backend_session.model.name == "tiny-base"
        ),
        timeout=LOAD_TIMEOUT_MS,
    )
    assert window.banner.isVisible() and "without a chat template" in window.banner.text()
    assert window.chat.side_panel.sampling_box.prompt.choice() == ps.CONTINUE
    assert window.chat.chat_view.prompt_edit.placeholderText() == ps.CONTINUE_PLACEHOLDER
