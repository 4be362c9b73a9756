"""The side panel rendered from a backend's card, on its own (no window, no server): a
server's card greys what a client cannot measure with the card's reasons, a server that sends
neither log-probs nor usage (llama.cpp's) gets the card's words on why, a model run here
shows every figure, and the way back."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chatapp.engine.backend import BackendCard, Measure
from chatapp.engine.engine import Engine
from chatapp.engine.figures import AnswerFigures
from chatapp.gui.chat.side_panel import FIGURES, SidePanel
from chatapp.gui.remote.figures import NOT_AVAILABLE, BackendFigures, unreported_sentence
from chatapp.remote.card import server_card
from chatapp.session import formatting as fmt
from chatapp.units import fmt_bytes

LLAMA_CPP = server_card("smollm2.gguf", "http://127.0.0.1:8080", 2048, False, None)
CHATAPP = server_card("varied-llama", "http://127.0.0.1:8000", 512, True, None)
# What llama.cpp's server streams: text, no log-probs, no usage.
BARE = AnswerFigures(
    mode="remote", device="remote", tokens_per_s=41.0, ttft_s=0.2, generated_tokens=9
)


def panel_with_figures(qtbot) -> tuple[SidePanel, BackendFigures]:
    panel = SidePanel()
    qtbot.addWidget(panel)
    panel.set_device_memory(False, "CPU")
    panel.show()
    return panel, BackendFigures(panel)


def value_label(panel: SidePanel, key: str):  # the panel's label of FIGURES key
    return getattr(panel.figures_box, f"{key}_value")


def test_every_unreported_figure_is_named() -> None:
    sentence = unreported_sentence(LLAMA_CPP)
    for words in ("loop", "device", "threads", "KV bytes per token", "host↔device bytes"):
        assert words in sentence, words
    assert "prompt perplexity" in sentence and "tokens/s" not in sentence


def test_what_a_chatapp_server_reports_is_not_called_unreported() -> None:
    # Its box lists its own prompt perplexity and host↔device bytes under the note.
    sentence = unreported_sentence(CHATAPP)
    assert "prompt perplexity" not in sentence and "host↔device" not in sentence
    assert "KV bytes per token" in sentence  # what it does not report is still named


def test_a_server_without_logprobs_or_usage(qtbot) -> None:
    panel, figures = panel_with_figures(qtbot)
    local_note = panel.figures_box.transfer_note.text()
    figures.set_card(LLAMA_CPP)
    assert figures.box.isVisible() and not figures.server_rows.isVisible()
    assert "reports no figures of its own" in figures.server_caption.text()
    assert "smollm2.gguf" in figures.server_label.text()
    assert panel.figures_box.context_value.text() == "0 / 2048"
    panel.show_stats(BARE)
    assert panel.figures_box.tokens_per_second_value.text() == "41.0"
    assert panel.figures_box.ttft_value.text() == "200"
    assert "network" in panel.figures_box.ttft_value.toolTip()  # the card's words
    for key in ("perplexity", "context"):  # this answer came without them: the card says why
        label = value_label(panel, key)
        assert label.text() == NOT_AVAILABLE and not label.isEnabled()
        assert label.toolTip() == LLAMA_CPP.measure(key).missing
    assert panel.figures_box.transfer_value.text() == NOT_AVAILABLE  # never "0 B" for a server
    assert panel.figures_box.transfer_value.toolTip() == LLAMA_CPP.measure("transfer").absent
    assert panel.figures_box.transfer_note.text() != local_note
    # A new answer starts: still greyed, not zeros.
    panel.start_answer()
    assert panel.figures_box.prompt_perplexity_value.text() == NOT_AVAILABLE
    assert panel.figures_box.transfer_value.text() == NOT_AVAILABLE

    # The next answer sends usage: the context is shown again, without the last one's reason.
    panel.show_stats(replace(BARE, prompt_tokens=7))
    assert panel.figures_box.context_value.isEnabled()
    assert panel.figures_box.context_value.toolTip() != LLAMA_CPP.measure("context").missing

    figures.set_card(None)  # back to the local model
    assert not figures.box.isVisible() and panel.loop_box.isEnabled()
    for key in ("perplexity", "prompt_perplexity", "transfer", "context"):
        label = value_label(panel, key)
        assert label.isEnabled() and label.text() == fmt.MISSING, key
    assert panel.figures_box.transfer_note.text() == local_note
    assert "prefill" in panel.figures_box.ttft_value.toolTip()  # the local explanation again


def test_a_chatapp_server_with_logprobs_and_usage_keeps_its_figures(qtbot) -> None:
    panel, figures = panel_with_figures(qtbot)
    figures.set_card(CHATAPP)
    assert figures.server_rows.isVisible()
    answer = AnswerFigures(
        mode="remote", device="remote", tokens_per_s=80.0, ttft_s=0.05, perplexity=3.5,
        prompt_tokens=20, generated_tokens=9, context_length=512,
    )  # fmt: skip
    panel.show_stats(answer)
    for key in ("perplexity", "context"):  # sent this time: shown, not greyed
        label = value_label(panel, key)
        assert label.isEnabled() and label.text() != NOT_AVAILABLE, key
    assert panel.figures_box.context_value.text() == "29 / 512"


def test_a_model_run_here_shows_every_figure_its_card_reports(qtbot, tiny_model_dir: Path) -> None:
    card = Engine(tiny_model_dir, threads=1).card()
    assert all(card.measure(key).reported for key in FIGURES)
    panel, figures = panel_with_figures(qtbot)
    figures.set_card(LLAMA_CPP)  # first a server, then the model run here
    figures.set_card(card)
    assert not figures.box.isVisible() and panel.loop_box.isEnabled()
    assert panel.loaded().name != "remote"  # the device line is the local model's again
    local = AnswerFigures(
        mode="iobinding", device="cpu", tokens_per_s=50.0, ttft_s=0.1, perplexity=2.0,
        prompt_perplexity=4.0, prompt_tokens=12, generated_tokens=5, context_length=256,
        h2d_bytes_per_token=0.0, d2h_bytes_per_token=0.0,
    )  # fmt: skip
    panel.show_stats(local)
    for key in FIGURES:
        label = value_label(panel, key)
        assert label.isEnabled() and label.text() not in (NOT_AVAILABLE, fmt.MISSING), key
    assert "prefill" in panel.figures_box.ttft_value.toolTip()  # the panel's own words


def test_server_figures_read_like_the_panel(qtbot) -> None:
    _panel, figures = panel_with_figures(qtbot)
    figures.set_card(LLAMA_CPP)
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
    panel, figures = panel_with_figures(qtbot)
    figures.set_card(LLAMA_CPP)
    label = panel.figures_box.prompt_perplexity_value
    assert label.text() == NOT_AVAILABLE
    figures.show_server({"prompt_perplexity": 9.3})
    assert label.text() == fmt.perplexity(9.3) == figures.server_values["prompt_perplexity"].text()
    assert "Reported by the server" in label.toolTip()
    panel.show_stats(BARE)  # the client's figures of the same answer keep the server's word
    assert label.text() == fmt.perplexity(9.3)
    figures.show_server({"prompt_perplexity": None})
    assert label.text() == NOT_AVAILABLE


def test_a_card_without_a_figure_greys_it_with_its_reason(qtbot) -> None:
    """Whatever a card says is not reported is greyed with its words, not a type's."""
    card: BackendCard = replace(
        CHATAPP, measures=(*CHATAPP.measures[:1], Measure("tokens_per_second", absent="why not"))
    )
    panel, figures = panel_with_figures(qtbot)
    figures.set_card(card)
    panel.show_stats(BARE)
    label = panel.figures_box.tokens_per_second_value
    assert label.text() == NOT_AVAILABLE and label.toolTip() == "why not"
    assert not label.isEnabled()
