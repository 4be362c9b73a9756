"""Each chat owns its settings and banners (issue 47): switching chats, loading a chat's own
model from its banner, regenerating and starting new chats never change another chat's
settings, and banners go away when their cause does (the real window, offscreen)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from chatapp.datadir import ENV_VAR
from chatapp.engine.text.chat import STYLE_PLAIN_CHAT
from chatapp.gui.chat.controller import State
from chatapp.gui.main_window import MainWindow
from chatapp.session import prompt_style as ps
from chatapp.store import HistoryStore
from tests.gui.conftest import LOAD_TIMEOUT_MS, greedy, send_and_wait, set_sampling
from tests.gui.history.test_ui import click_row


def _stored_style(history_file: Path, chat_id: int) -> str | None:
    with HistoryStore(history_file) as store:
        infos = {info.id: info for info in store.list_conversations()}
    style = json.loads(infos[chat_id].settings or "{}").get("prompt_style")
    return None if style is None else str(style)


def _banner(window: MainWindow) -> str:
    """The banner's text while it shows."""
    return window.banner.text() if window.banner.isVisible() else ""


def _wait_model(qtbot, window: MainWindow, name: str) -> None:
    c = window.chat.controller.backend_session
    qtbot.waitUntil(
        lambda: c.state is State.READY and c.model is not None and c.model.name == name,
        timeout=LOAD_TIMEOUT_MS,
    )


def test_load_on_a_reopened_chats_banner_keeps_its_prompt_style(
    qtbot,
    make_window,
    base_model_dir: Path,
    tiny_model_dir: Path,
    tmp_path: Path,
    history_file: Path,
    monkeypatch,
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "data"))
    base = tmp_path / "data" / "models" / "tiny-base"
    shutil.copytree(base_model_dir, base)
    window: MainWindow = make_window(["--model", str(base)])
    prompt = window.chat.side_panel.sampling_box.prompt
    view = window.chat.chat_view

    # A chat with the base model, talked to as User:/Assistant: lines.
    assert prompt.choice() == ps.CONTINUE
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CHAT))
    assert "continued as text" not in _banner(window)  # the notice follows the choice
    assert view.prompt_edit.placeholderText() != ps.CONTINUE_PLACEHOLDER
    set_sampling(window, greedy(3))
    send_and_wait(qtbot, window, "What is the capital of France?")
    base_chat = window.chat.conversation.id
    assert base_chat is not None and _stored_style(history_file, base_chat) == STYLE_PLAIN_CHAT

    # Regenerate under greedy offers a varied answer; a new chat does not carry the note.
    view.regenerate_button.click()
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=LOAD_TIMEOUT_MS
    )
    assert view.regenerate_note.isVisible()
    view.new_chat_button.click()
    assert not view.regenerate_note.isVisible()

    # Another (chat) model in a new chat: its own default, the base chat untouched.
    assert window.chat.open_model(tiny_model_dir)
    _wait_model(qtbot, window, "tiny-llama")
    assert prompt.choice() == ps.CHAT
    assert "base model" not in _banner(window)
    send_and_wait(qtbot, window, "hello")
    chat_chat = window.chat.conversation.id
    assert _stored_style(history_file, base_chat) == STYLE_PLAIN_CHAT

    # Reopen the base chat: its banner offers its model; loading it keeps the chat's Chat.
    click_row(qtbot, window, base_chat)
    assert prompt.choice() == ps.CHAT
    # Its messages are counted for the model loaded now, and say so (not tiny-base's counts).
    qtbot.waitUntil(
        lambda: "tokens of context for tiny-llama" in view.transcript.toPlainText(),
        timeout=LOAD_TIMEOUT_MS,
    )
    note = window.chat.side_panel.figures_box.context_note
    assert "tiny-llama" in note.text() and "tiny-base" in note.text()
    banner = window.banner
    assert banner.isVisible() and banner.action_button.text() == "Load tiny-base"
    banner.action_button.click()
    _wait_model(qtbot, window, "tiny-base")
    assert window.chat.conversation.id == base_chat
    assert prompt.choice() == ps.CHAT
    assert prompt.prompt_style() == STYLE_PLAIN_CHAT
    assert "continued as text" not in _banner(window)
    assert view.prompt_edit.placeholderText() != ps.CONTINUE_PLACEHOLDER
    send_and_wait(qtbot, window, "And Italy?")
    assert _stored_style(history_file, base_chat) == STYLE_PLAIN_CHAT

    # The other chat kept its own settings throughout.
    assert chat_chat is not None and _stored_style(history_file, chat_chat) != STYLE_PLAIN_CHAT
    click_row(qtbot, window, chat_chat)
    assert prompt.choice() == ps.CHAT


def test_a_base_model_opened_over_a_chat_says_it_has_no_template(
    qtbot, make_window, tiny_model_dir: Path, base_model_dir: Path
) -> None:
    window: MainWindow = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(2))
    send_and_wait(qtbot, window, "hello")
    window.open_model(base_model_dir)
    _wait_model(qtbot, window, "tiny-base")
    text = _banner(window)
    assert "new chat" in text and "without a chat template" in text
    prompt = window.chat.side_panel.sampling_box.prompt
    assert prompt.choice() == ps.CONTINUE
    assert window.chat.chat_view.prompt_edit.placeholderText() == ps.CONTINUE_PLACEHOLDER


def test_the_regenerate_note_goes_when_the_new_answer_differs(
    qtbot, make_window, varied_model_dir: Path
) -> None:
    """Greedy says Regenerate writes the same answer; a longer limit makes another: the note
    that said "the same answer again" does not stay under it."""
    window: MainWindow = make_window(["--model", str(varied_model_dir)])
    view = window.chat.chat_view
    set_sampling(window, greedy(3))
    send_and_wait(qtbot, window, "hello")
    first = window.chat.conversation.messages[-1]
    window.chat.side_panel.sampling_box.max_tokens_spin.setValue(6)
    view.regenerate_button.click()
    assert view.regenerate_note.isVisible()  # offered as it starts: greedy, same settings
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=LOAD_TIMEOUT_MS
    )
    again = window.chat.conversation.messages[-1]
    assert again.version == 1
    assert view.regenerate_note.isVisible() == (again.content == first.content)
    if first.figures is not None and first.figures.finish_reason == "length":
        assert again.content != first.content and not view.regenerate_note.isVisible()


def test_a_note_and_a_placeholder_do_not_follow_into_another_models_chat(
    qtbot, make_window, tiny_model_dir: Path, base_model_dir: Path
) -> None:
    """Issue 47: "Regenerate with Balanced" carried into a new chat with another model, and the
    message box kept "Text for the model to continue" under Prompt: Chat with a chat model."""
    window: MainWindow = make_window(["--model", str(tiny_model_dir)])
    view = window.chat.chat_view
    chat_placeholder = view.prompt_edit.placeholderText()
    assert chat_placeholder != ps.CONTINUE_PLACEHOLDER
    set_sampling(window, greedy(2))
    send_and_wait(qtbot, window, "hello")
    view.regenerate_button.click()
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=LOAD_TIMEOUT_MS
    )
    assert view.regenerate_note.isVisible()  # greedy: the same answer again, Balanced offered

    # Another model over this chat: a new chat, with no note about the old chat's answer.
    window.open_model(base_model_dir)
    _wait_model(qtbot, window, "tiny-base")
    assert window.chat.conversation.messages == []
    assert not view.regenerate_note.isVisible()
    prompt = window.chat.side_panel.sampling_box.prompt
    assert prompt.choice() == ps.CONTINUE
    assert view.prompt_edit.placeholderText() == ps.CONTINUE_PLACEHOLDER

    # A chat model again: Chat, and the chat's placeholder and banner, not the base model's.
    window.open_model(tiny_model_dir)
    _wait_model(qtbot, window, "tiny-llama")
    assert prompt.choice() == ps.CHAT
    assert view.prompt_edit.placeholderText() == chat_placeholder
    assert "base model" not in _banner(window)
    assert not view.regenerate_note.isVisible()
