"""File > Connect to server… in the window: a chat streamed from `chatapp serve` (in this
process, 127.0.0.1) lands in the transcript, the history and the export like a local one,
with the server's model id and device "remote"; the side panel greys what a client cannot
measure; Disconnect and opening a local model go back to the local model."""

from __future__ import annotations

from pathlib import Path

from chatapp.engine.engine import Engine
from chatapp.engine.text.chat import Message
from chatapp.gui.chat.controller import State
from chatapp.gui.compare.feature import CompareFeature, compare_unavailable
from chatapp.gui.history.ui import HistoryUi
from chatapp.gui.main_window import MainWindow
from chatapp.gui.remote.figures import NOT_AVAILABLE, loop_reason
from chatapp.remote.card import LOOP_ABSENT
from chatapp.session import formatting as fmt
from chatapp.store import HistoryStore
from tests.gui.conftest import LOAD_TIMEOUT_MS, greedy, send_and_wait, set_sampling
from tests.gui.remote.conftest import connect, remote_ui
from tests.serving import Served


def stored_answers(path: Path) -> list[tuple[str, str | None, str | None, str | None]]:
    """(content, model, device, mode) of every stored answer, read by another connection."""
    with HistoryStore(path) as store:
        out = []
        for info in store.list_conversations():
            for m in store.load_conversation(info.id).messages:
                if m.role == "assistant" and m.figures is not None:
                    f = m.figures
                    out.append((m.content, f.model, f.device, f.mode))
        return out


def test_a_remote_chat_lands_in_the_transcript_history_and_export(
    qtbot, window: MainWindow, served: Served, varied_model_dir: Path, history_file: Path
) -> None:
    summary = connect(qtbot, window, served.url)
    assert (
        summary.name == "varied-llama" and window.chat.controller.backend_session.remote == summary
    )
    assert "varied-llama" in window.model_label.text()
    assert "varied-llama" in window.windowTitle()
    set_sampling(window, greedy(10))
    send_and_wait(qtbot, window, "hello")

    expected = Engine(varied_model_dir, threads=1).chat([Message("user", "hello")], greedy(10))
    expected.run()
    answer = window.chat.conversation.messages[-1]
    assert answer.role == "assistant" and answer.content == expected.text
    assert answer.figures is not None and answer.figures.device == "remote"
    assert answer.figures.model == "varied-llama" and answer.figures.generated_tokens == 10
    assert expected.text in window.chat.chat_view.transcript.toPlainText()
    assert window.banner.isHidden() or window.banner.level not in ("error",)
    # The history keeps it with the server's model id and device "remote".
    assert stored_answers(history_file) == [(expected.text, "varied-llama", "remote", "remote")]
    conv_id = window.chat.conversation.id
    assert conv_id is not None
    exported = window.feature(HistoryUi).controller.sync_core.export_text(conv_id, "markdown")
    assert exported is not None and expected.text in exported and "varied-llama" in exported
    # The line under the answer names the model and the server, not a loop and a device.
    line = fmt.figures_line(answer.figures)
    assert line.startswith("varied-llama · remote server") and "10 tokens" in line


def test_the_side_panel_greys_what_a_client_cannot_measure(
    qtbot, window: MainWindow, served: Served
) -> None:
    panel = window.chat.side_panel
    card = connect(qtbot, window, served.url)
    set_sampling(window, greedy(12))
    send_and_wait(qtbot, window, "hello")
    # Measured here: shown.
    assert panel.figures_box.tokens_per_second_value.text() != fmt.MISSING
    assert panel.figures_box.ttft_value.text() != fmt.MISSING
    assert panel.figures_box.perplexity_value.text() != fmt.MISSING  # chatapp serve sends log-probs
    assert panel.figures_box.latency_chart.point_count == 11
    assert "network" in panel.figures_box.ttft_value.toolTip()
    # Not measurable from a client: greyed, with a word on why, never 0.
    transfer = panel.figures_box.transfer_value
    assert transfer.text() == NOT_AVAILABLE and not transfer.isEnabled()
    assert "Not available from a remote server" in transfer.toolTip()
    # Prompt perplexity: chatapp serve's own where it reported one (none where its cache held
    # the prompt, as after the module's earlier tests), else greyed with why.
    prompt = panel.figures_box.prompt_perplexity_value
    if prompt.text() == NOT_AVAILABLE:
        assert not prompt.isEnabled() and "Not available from a remote server" in prompt.toolTip()
    else:
        assert prompt.text() != fmt.MISSING and prompt.isEnabled()
        assert "Reported by the server" in prompt.toolTip()
    assert not panel.loop_box.isEnabled() and panel.loop_title() == "The server's loop and device"
    assert not panel.loop_toggle.naive_button.isEnabled()
    assert not panel.device_selector.isEnabled() and not panel.threads_spin.isEnabled()
    loop_controls = (
        panel.loop_toggle.naive_button,
        panel.loop_toggle.iobinding_button,
        panel.device_selector,
        panel.threads_spin,
    )
    for control in loop_controls:  # greyed with why, also after an answer re-set the tips
        assert control.toolTip() == loop_reason(card), control.objectName()
    # chatapp serve names its loop in its card: the reason says which it runs.
    assert "IO-Binding" in loop_reason(card) and loop_reason(card) != LOOP_ABSENT
    figures = remote_ui(window).figures
    assert figures.box.isVisible()
    window.resize(1300, 850)
    window.show()
    qtbot.waitExposed(window)
    note_label = figures.measured_note  # all its wrapped lines fit (the panel clipped them)
    qtbot.waitUntil(lambda: note_label.height() >= note_label.heightForWidth(note_label.width()))
    note = note_label.text()
    for word in ("loop", "device", "threads", "KV bytes"):
        assert word in note, word
    # What the rows below report is not called unreported in the note above them.
    unreported = note.split("Not reported by it:")[-1]
    assert "host↔device" not in unreported and "prompt perplexity" not in unreported, note
    # chatapp serve's own figures, labelled as the server's.
    assert "Reported by the server" in figures.server_caption.text()
    assert figures.server_values["loop"].text() == "IO-Binding"
    assert figures.server_values["device_label"].text() == "CPU"
    assert figures.server_values["tokens_per_s"].text() != fmt.MISSING
    assert figures.server_values["h2d_bytes_per_token"].text() == "0 B"
    # Usage came back: the context used is the server's count.
    answer = window.chat.conversation.messages[-1].figures
    assert answer is not None and answer.prompt_tokens
    assert panel.figures_box.context_value.text() == f"{answer.prompt_tokens + 12} / 512"
    # Disconnected: the chat is counted again for the local model, not "0 / 512". The count
    # Disconnect asks for is made on the local model (it ran on the server's backend, which
    # cannot count: nothing came back and the panel read "–" until the next answer).
    chat = window.chat.controller.chat
    counted: list[int] = []
    chat.events.context.connect(lambda report: report and counted.append(report.request_id))
    remote_ui(window).disconnect_action.trigger()
    asked = chat._context_id
    assert asked
    qtbot.waitUntil(lambda: asked in counted, timeout=LOAD_TIMEOUT_MS)
    used = panel.figures_box.context_value.text()
    assert not used.startswith("0 ") and used.endswith(" / 512"), used
    # Counted on the local model (the server cannot count): each message says its tokens.
    window.chat.chat_view.flush()
    assert "tokens of context" in window.chat.chat_view.transcript.toPlainText()


def test_the_comparison_is_unavailable_while_a_server_answers(
    qtbot, window: MainWindow, served: Served
) -> None:
    feature = window.feature(CompareFeature)
    assert feature is not None
    compare = feature.view
    assert compare.run_button.isEnabled()
    card = connect(qtbot, window, served.url)
    assert not compare.run_button.isEnabled() and not compare.sweep_button.isEnabled()
    unavailable = compare_unavailable(card)  # where the card says the answers come from
    assert compare.status.text() == unavailable and served.url in unavailable
    remote_ui(window).disconnect_action.trigger()
    assert window.chat.controller.backend_session.remote is None and compare.run_button.isEnabled()
    assert compare.status.text() != unavailable
    # The Remote server box has the way back too.
    connect(qtbot, window, served.url)
    button = remote_ui(window).figures.disconnect_button
    assert button.isEnabled()
    with qtbot.waitSignal(window.chat.controller.backend_session.events.backend_changed) as changed:
        button.click()
    assert changed.args == [None] and window.chat.controller.backend_session.remote is None
    assert compare.status.text() != unavailable


def test_disconnect_and_opening_a_model_return_to_the_local_model(
    qtbot, window: MainWindow, served: Served, tiny_model_dir: Path
) -> None:
    ui = remote_ui(window)
    assert not ui.disconnect_action.isEnabled()
    card = connect(qtbot, window, served.url)
    assert ui.disconnect_action.isEnabled()
    window.show_message("The server stopped answering.", "error")  # as a remote failure
    with qtbot.waitSignal(window.chat.controller.backend_session.events.backend_changed) as changed:
        ui.disconnect_action.trigger()
    assert changed.args == [None] and window.chat.controller.backend_session.remote is None
    assert window.banner.isHidden()  # the server's problem went with it
    panel = window.chat.side_panel
    assert panel.loop_box.isEnabled() and panel.device_selector.isEnabled()
    assert not ui.figures.box.isVisible()
    assert "KV" in panel.loop_toggle.naive_button.toolTip()  # the local tips are back
    assert panel.device_selector.toolTip() != loop_reason(card) and panel.threads_spin.toolTip()
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "hello")
    local = window.chat.conversation.messages[-1].figures
    assert local is not None and local.device == "cpu" and local.mode == "iobinding"
    assert window.chat.side_panel.figures_box.transfer_value.text() == "0 B"
    # Connected again, then a local model opened: back to local as well.
    connect(qtbot, window, served.api)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=LOAD_TIMEOUT_MS
    ):
        window.open_model(tiny_model_dir)
    assert (
        window.chat.controller.backend_session.remote is None
        and window.chat.controller.backend_session.state is State.READY
    )
    assert window.chat.side_panel.loop_box.isEnabled() and not ui.figures.box.isVisible()
    assert "tiny" in window.model_label.text()


def test_regenerate_with_a_server_replaces_the_answer(
    qtbot, window: MainWindow, served: Served
) -> None:
    connect(qtbot, window, served.url)
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "same prompt")
    first = window.chat.conversation.messages[-1]
    with qtbot.waitSignal(
        window.chat.controller.chat.events.answer_finished, timeout=LOAD_TIMEOUT_MS
    ):
        window.chat.chat_view.regenerate_button.click()
    assert [m.role for m in window.chat.conversation.messages] == ["user", "assistant"]
    again = window.chat.conversation.messages[-1]
    assert again.content == first.content and again is not first  # greedy: the same answer
    assert again.figures is not None and again.figures.device == "remote"


def test_connecting_over_a_chat_does_not_say_none_of_it_is_used(
    qtbot, window: MainWindow, served: Served
) -> None:
    # Connected over a chat with messages, the panel read "0 / 512": the server has counted
    # nothing yet, so the figure waits for its first answer (as after Disconnect, issue 47).
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "hello")
    panel = window.chat.side_panel
    assert not panel.figures_box.context_value.text().startswith("0 ")
    connect(qtbot, window, served.url)
    assert panel.figures_box.context_value.text() == fmt.MISSING
    send_and_wait(qtbot, window, "and again")
    used = panel.figures_box.context_value.text()
    assert not used.startswith("0 ") and used.endswith(" / 512"), used
    remote_ui(window).disconnect_action.trigger()
