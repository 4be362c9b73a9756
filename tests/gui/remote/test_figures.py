"""The side panel's remote mode on its own (no model, no server): greyed figures with their
reasons, a server that sends neither log-probs nor usage (llama.cpp's), and the way back."""

from __future__ import annotations

from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.remote.figures import (
    NO_LOGPROBS_TIP,
    NO_USAGE_TIP,
    NOT_AVAILABLE,
    RemoteFigures,
    unavailable_sentence,
)
from chatapp.remote.engine import UNAVAILABLE
from chatapp.session import formatting as fmt
from chatapp.session.remote_jobs import RemoteSummary
from chatapp.units import fmt_bytes

LLAMA_CPP = RemoteSummary(
    server="http://127.0.0.1:8080",
    base_url="http://127.0.0.1:8080/v1",
    name="smollm2.gguf",
    max_context=2048,
    is_chatapp=False,
    notice=None,
)
# What llama.cpp's server streams: text, no log-probs, no usage.
BARE = AnswerFigures(
    mode="remote", device="remote", tokens_per_s=41.0, ttft_s=0.2, generated_tokens=9
)


def panel_with_remote(qtbot) -> tuple[SidePanel, RemoteFigures]:
    panel = SidePanel()
    qtbot.addWidget(panel)
    panel.set_device_memory(False, "CPU")
    panel.show()
    return panel, RemoteFigures(panel)


def test_every_unavailable_figure_is_named() -> None:
    sentence = unavailable_sentence()
    assert len(UNAVAILABLE) == 5 and all(k not in ("", None) for k in UNAVAILABLE)
    for words in ("the loop", "the device and its threads", "host↔device bytes"):
        assert words in sentence


def test_a_server_without_logprobs_or_usage(qtbot) -> None:
    panel, figures = panel_with_remote(qtbot)
    local_note = panel.figures_box.transfer_note.text()
    figures.set_remote(LLAMA_CPP)
    assert figures.box.isVisible() and not figures.server_rows.isVisible()
    assert "reports no figures of its own" in figures.server_caption.text()
    assert "smollm2.gguf" in figures.server_label.text()
    assert panel.figures_box.context_value.text() == "0 / 2048"
    panel.show_stats(BARE)
    assert panel.figures_box.tokens_per_second_value.text() == "41.0"
    assert panel.figures_box.ttft_value.text() == "200"
    for label in (panel.figures_box.perplexity_value, panel.figures_box.context_value):
        assert label.text() == NOT_AVAILABLE and not label.isEnabled()
    assert panel.figures_box.perplexity_value.toolTip() == NO_LOGPROBS_TIP
    assert panel.figures_box.context_value.toolTip() == NO_USAGE_TIP
    assert panel.figures_box.transfer_value.text() == NOT_AVAILABLE  # never "0 B" for a server
    assert panel.figures_box.transfer_note.text() != local_note
    # A new answer starts: still greyed, not zeros.
    panel.start_answer()
    assert panel.figures_box.prompt_perplexity_value.text() == NOT_AVAILABLE
    assert panel.figures_box.transfer_value.text() == NOT_AVAILABLE

    figures.set_remote(None)  # back to the local model
    assert not figures.box.isVisible() and panel.loop_box.isEnabled()
    for label in (
        panel.figures_box.perplexity_value,
        panel.figures_box.prompt_perplexity_value,
        panel.figures_box.transfer_value,
        panel.figures_box.context_value,
    ):
        assert label.isEnabled() and label.text() == fmt.MISSING
    assert panel.figures_box.transfer_note.text() == local_note
    assert "prefill" in panel.figures_box.ttft_value.toolTip()  # the local explanation again


def test_server_figures_read_like_the_panel(qtbot) -> None:
    _panel, figures = panel_with_remote(qtbot)
    figures.set_remote(LLAMA_CPP)
    figures.show_server(
        {
            "loop": "naive",
            "device_label": "NVIDIA H100",
            "tokens_per_s": 812.25,
            "ttft_s": 0.0123,
            "h2d_bytes_per_token": 2048,
            "d2h_bytes_per_token": 2048,
            "prompt_perplexity": None,
            "queue_wait_s": "not a number",
        }
    )
    values = {key: label.text() for key, label in figures.server_values.items()}
    assert values["loop"] == "Naive" and values["device_label"] == "NVIDIA H100"
    assert values["tokens_per_s"] == "812.2" and values["ttft_s"] == "12"
    assert values["h2d_bytes_per_token"] == fmt_bytes(4096)
    assert values["prompt_perplexity"] == fmt.MISSING  # null in the server's answer
    assert values["queue_wait_s"] == fmt.MISSING  # a server's odd value is not a crash
    figures.show_server(None)
    assert all(label.text() == fmt.MISSING for label in figures.server_values.values())


def test_prompt_perplexity_shows_what_a_chatapp_server_reported(qtbot) -> None:
    """Not "n/a" in the panel beside the server's own 9.30 (issue 47)."""
    panel, figures = panel_with_remote(qtbot)
    figures.set_remote(LLAMA_CPP)
    label = panel.figures_box.prompt_perplexity_value
    assert label.text() == NOT_AVAILABLE
    figures.show_server({"prompt_perplexity": 9.3})
    assert label.text() == fmt.perplexity(9.3) == figures.server_values["prompt_perplexity"].text()
    assert "Reported by the server" in label.toolTip()
    panel.show_stats(BARE)  # the client's figures of the same answer keep the server's word
    assert label.text() == fmt.perplexity(9.3)
    figures.show_server({"prompt_perplexity": None})
    assert label.text() == NOT_AVAILABLE
