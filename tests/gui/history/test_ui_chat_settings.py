"""Per-chat settings in the window: a chat remembers its model, sampling, prompt style, stop
strings, system prompt and tools, gets them back when opened from the list, and the list names the
model each chat was with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatapp.engine.sampling import SamplingSettings
from chatapp.gui.chat.controller import State
from chatapp.gui.history.ui import HistoryUi
from chatapp.gui.main_window import MainWindow
from chatapp.session import prompt_style as ps
from chatapp.store import HistoryStore
from tests.gui.conftest import greedy, send_and_wait, set_sampling
from tests.gui.history.test_ui import click_row


def test_a_reopened_chat_gets_its_settings_back_and_the_list_names_its_model(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path
) -> None:
    window: MainWindow = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    panel = window.chat.side_panel
    first = SamplingSettings(temperature=0.4, top_k=5, top_p=0.7, seed=11, max_new_tokens=6)
    set_sampling(window, first)
    panel.system_prompt_box.set_text("Answer in French.")
    prompt = panel.sampling_box.prompt
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CONTINUE))
    prompt.stops_edit.setText(r"END, \n\n")
    send_and_wait(qtbot, window, "first chat")
    chat_id = window.chat.conversation.id
    assert chat_id is not None

    # Another chat with other settings.
    window.chat.chat_view.new_chat_button.click()
    set_sampling(window, greedy(3))
    panel.system_prompt_box.set_text("")
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CHAT))
    prompt.stops_edit.setText("")
    send_and_wait(qtbot, window, "second chat")

    click_row(qtbot, window, chat_id)
    assert window.chat.conversation.id == chat_id
    settings = panel.sampling_settings()
    assert settings.max_new_tokens == 6 and settings.seed == 11
    assert (settings.temperature, settings.top_k, settings.top_p) == (0.4, 5, 0.7)
    assert panel.system_prompt_box.text() == "Answer in French."
    assert prompt.choice() == ps.CONTINUE and prompt.user_stops() == ("END", "\n\n")

    # The list names the model each chat was with; the file keeps it (a restart reads it).
    name = window.chat.controller.backend_session.model.name
    ui = window.feature(HistoryUi)
    item = ui.panel.item_for(chat_id)
    assert item is not None and name in item.toolTip()
    with HistoryStore(history_file) as store:
        infos = {info.id: info for info in store.list_conversations()}
    assert infos[chat_id].model == name and '"prompt_style": "continue"' in infos[chat_id].settings


def test_a_chat_reopened_under_another_model_offers_to_load_its_own(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """The banner names the model the chat was with, and its button loads that model when it
    is in the models folder (found by name only: a chat's model name is never a path)."""
    import shutil

    from chatapp.datadir import ENV_VAR

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "data"))
    own = tmp_path / "data" / "models" / "tiny-own"
    shutil.copytree(tiny_model_dir, own)
    other = tmp_path / "elsewhere" / "tiny-other"
    shutil.copytree(tiny_model_dir, other)
    window: MainWindow = make_window(["--model", str(own)])
    set_sampling(window, greedy(2))
    send_and_wait(qtbot, window, "first chat")
    chat_id = window.chat.conversation.id
    assert chat_id is not None

    window.chat.chat_view.new_chat_button.click()
    assert window.chat.open_model(other)
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=60_000
    )
    assert window.chat.controller.backend_session.model.name == "tiny-other"
    click_row(qtbot, window, chat_id)
    banner = window.banner
    assert banner.isVisible() and "This chat was with tiny-own" in banner.text()
    assert banner.action_button.isVisible() and banner.action_button.text() == "Load tiny-own"
    banner.action_button.click()
    assert not banner.isVisible()
    qtbot.waitUntil(
        lambda: (
            window.chat.controller.backend_session.state is State.READY
            and window.chat.controller.backend_session.model.name == "tiny-own"
        ),
        timeout=60_000,
    )
    assert window.chat.conversation.id == chat_id  # the chat stays, now with its own model


def test_a_reopened_chat_gets_its_tools_back(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("llguidance", reason="tools are kept only where they can be used")
    window: MainWindow = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(40))
    tools = window.chat.side_panel.sampling_box.tools
    pick = {"name": "pick", "parameters": {"type": "object", "properties": {}}}
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([pick]), encoding="utf-8")
    assert tools.load_file(path)
    tools.choice_box.setCurrentIndex(tools.choice_box.findData("required"))
    send_and_wait(qtbot, window, "with tools")
    with_tools = window.chat.conversation.id
    assert window.chat.conversation.messages[-1].shown.startswith("**Tool call: pick**")
    window.chat.chat_view.new_chat_button.click()
    tools.clear_button.click()
    send_and_wait(qtbot, window, "without")
    without = window.chat.conversation.id
    assert with_tools is not None and without is not None

    click_row(qtbot, window, with_tools)
    assert [t.name for t in tools.tools()] == ["pick"] and tools.choice() == "required"
    click_row(qtbot, window, without)
    assert tools.tools() == () and tools.label.text() == "Tools: none"


def test_a_restart_reopens_the_last_chat_and_an_import_keeps_to_its_own_settings(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    window: MainWindow = make_window(["--model", str(tiny_model_dir)])
    prompt = window.chat.side_panel.sampling_box.prompt
    set_sampling(window, greedy(3))
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CONTINUE))
    send_and_wait(qtbot, window, "continued chat")
    continued = window.chat.conversation.id
    window.chat.chat_view.new_chat_button.click()
    prompt.choice_combo.setCurrentIndex(prompt.choice_combo.findData(ps.CHAT))
    set_sampling(window, greedy(4))
    send_and_wait(qtbot, window, "chatted chat")
    chatted = window.chat.conversation.id
    assert continued is not None and chatted is not None

    # Exported and imported: a chat of its own, named as imported, with its own settings.
    ui = window.feature(HistoryUi)
    click_row(qtbot, window, continued)
    ui.ask_save_path = lambda *_args: str(tmp_path / "continued.json")
    ui.export_current("json")
    ui.ask_open_path = lambda *_args: str(tmp_path / "continued.json")
    imported = ui.import_conversation()
    assert imported is not None and imported not in (continued, chatted)
    assert window.chat.conversation.id == imported and prompt.choice() == ps.CONTINUE
    item = ui.panel.item_for(imported)
    assert item is not None and item.text().startswith("continued chat (imported)")
    click_row(qtbot, window, chatted)
    assert prompt.choice() == ps.CHAT
    assert window.chat.side_panel.sampling_settings().max_new_tokens == 4

    # Closed on the chatted chat: a restart shows it again, with its settings.
    window.close()
    again: MainWindow = make_window(["--model", str(tiny_model_dir)])
    assert again.chat.conversation.id == chatted
    assert [m.content for m in again.chat.conversation.messages][:1] == ["chatted chat"]
    assert again.chat.side_panel.sampling_box.prompt.choice() == ps.CHAT
    assert again.chat.side_panel.sampling_settings().max_new_tokens == 4


def test_a_restart_keeps_the_last_chat_when_another_model_opens_first(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    """Closed on a chat with one model while another was loaded: the restart opens the loaded
    one and the chat stays, saying whose it was (it used to start a new chat)."""
    import shutil

    from chatapp.datadir import ENV_VAR

    monkeypatch.setenv(ENV_VAR, str(tmp_path / "data"))
    own = Path(shutil.copytree(tiny_model_dir, tmp_path / "data" / "models" / "tiny-own"))
    other = Path(shutil.copytree(tiny_model_dir, tmp_path / "elsewhere" / "tiny-other"))
    window: MainWindow = make_window(["--model", str(own)])
    set_sampling(window, greedy(2))
    send_and_wait(qtbot, window, "first chat")
    chat_id = window.chat.conversation.id
    window.chat.chat_view.new_chat_button.click()
    assert window.chat.open_model(other)
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=60_000
    )
    click_row(qtbot, window, chat_id)  # shown under tiny-other, as the window closes
    window.close()

    again: MainWindow = make_window([])  # opens the last model: tiny-other
    assert again.chat.controller.backend_session.model.name == "tiny-other"
    assert again.chat.conversation.id == chat_id
    assert [m.content for m in again.chat.conversation.messages][:1] == ["first chat"]
    banner = again.banner
    assert banner.isVisible() and "This chat was with tiny-own" in banner.text()
    assert banner.action_button.text() == "Load tiny-own"
