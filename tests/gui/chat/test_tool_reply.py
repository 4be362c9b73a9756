"""Reply as tool: the window shows the model's call, the user types the tool's result under it,
and the model goes on from it; the call and the result stay structured in the history, the
next prompt, the export and a restarted window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from chatapp.engine.text.chat import ToolCall
from chatapp.gui.chat.controller import State
from chatapp.gui.chat.tool_reply import ToolReplyBox
from chatapp.gui.history.ui import HistoryUi
from chatapp.gui.main_window import MainWindow
from chatapp.session.answer import AnswerRequest
from chatapp.store import HistoryStore
from tests.gui.conftest import ANSWER_TIMEOUT_MS, greedy, send_and_wait, set_sampling

pytest.importorskip("llguidance", reason="tool calls need llguidance")

PICK = {
    "name": "pick",
    "description": "Pick a colour",
    "parameters": {
        "type": "object",
        "properties": {"colour": {"enum": ["red", "blue"]}},
        "required": ["colour"],
        "additionalProperties": False,
    },
}


def _with_tool(window: MainWindow, tmp_path: Path) -> None:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([{"type": "function", "function": PICK}]), encoding="utf-8")
    tools = window.chat.side_panel.sampling_box.tools
    assert tools.load_file(path)
    # "required": the tiny model's answer is a call (the grammar makes it one).
    tools.choice_box.setCurrentIndex(tools.choice_box.findData("required"))


def _reply(qtbot, window: MainWindow, text: str) -> None:
    box = window.chat.chat_view.tool_reply
    box.edit.setPlainText(text)
    controller = window.chat.controller
    with qtbot.waitSignals(
        [controller.backend_session.events.state_changed],
        timeout=ANSWER_TIMEOUT_MS,
        check_params_cbs=[lambda state: state is State.READY],
    ):
        box.send_button.click()


def test_reply_as_tool_goes_on_and_survives_export_and_restart(
    qtbot,
    make_window,
    tiny_model_dir: Path,
    tmp_path: Path,
    history_file: Path,
    generate_requests: list[AnswerRequest],
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(120))
    _with_tool(window, tmp_path)
    view = window.chat.chat_view
    assert view.tool_reply.isHidden()
    send_and_wait(qtbot, window, "Pick a colour")
    call_answer = window.chat.conversation.messages[-1]
    (call,) = call_answer.tool_calls
    assert call.name == "pick" and json.loads(call.arguments)["colour"] in ("red", "blue")
    view.flush()
    shown = view.transcript.toPlainText()
    assert "Tool call: pick" in shown and '"colour"' in shown  # as before: name + arguments
    assert view.tool_reply.isVisible() and "pick" in view.tool_reply.label.text()

    _reply(qtbot, window, "blue is sold out")
    roles = [m.role for m in window.chat.conversation.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]  # the model went on
    result = window.chat.conversation.messages[2]
    assert (result.tool_call_id, result.tool_name, result.content) == (
        call.id,
        "pick",
        "blue is sold out",
    )
    # The next answer was asked with the call and the result, structured.
    sent = generate_requests[-1].messages
    assert sent[-2].tool_calls == (call,) and sent[-1].role == "tool"
    assert (sent[-1].tool_call_id, sent[-1].content) == (call.id, "blue is sold out")
    view.flush()
    assert "Tool result: pick" in view.transcript.toPlainText()
    # The new answer is a call too ("required"): the box offers a reply to it.
    assert view.tool_reply.isVisible() and view.tool_reply.edit.toPlainText() == ""

    # Saved as it is.
    conv_id = window.chat.conversation.id
    assert conv_id is not None
    with HistoryStore(history_file) as store:
        saved = store.load_conversation(conv_id).messages
        assert [m.role for m in saved] == roles
        assert saved[1].tool_calls == (call,) and saved[2].tool_call_id == call.id
        exported = store.export_json(conv_id)
    doc = json.loads(exported)
    assert doc["conversation"]["messages"][2]["tool_call_id"] == call.id

    # A restarted window opens the chat with its call, its result and the box.
    window.close()
    again = make_window(["--model", str(tiny_model_dir)])
    ui = again.feature(HistoryUi)
    assert ui is not None and ui.controller.sync_core.open(conv_id)
    reopened = again.chat.conversation.messages
    assert [m.role for m in reopened] == roles
    assert reopened[1].tool_calls == (call,) and reopened[2].content == "blue is sold out"
    again.chat.chat_view.flush()
    text = again.chat.chat_view.transcript.toPlainText()
    assert "Tool call: pick" in text and "Tool result: pick" in text and "blue is sold out" in text
    assert again.chat.chat_view.tool_reply.isVisible()


def test_must_call_one_says_the_next_answer_is_a_call_again(
    qtbot, make_window, tiny_model_dir: Path, tmp_path: Path
) -> None:
    # Under "Must call one" a reply brings another call, never the answer in words: the box
    # says so and how to get one (a user replied and got only calls, over and over).
    window = make_window(["--model", str(tiny_model_dir)])
    set_sampling(window, greedy(120))
    _with_tool(window, tmp_path)
    box = window.chat.chat_view.tool_reply
    send_and_wait(qtbot, window, "Pick a colour")
    assert box.isVisible() and box.note.isVisible() and "Model decides" in box.note.text()
    tools = window.chat.side_panel.sampling_box.tools
    tools.choice_box.setCurrentIndex(tools.choice_box.findData("auto"))
    assert box.isVisible() and not box.note.isVisible()  # the model may now answer in words
    tools.choice_box.setCurrentIndex(tools.choice_box.findData("required"))
    assert box.note.isVisible()


def test_a_long_call_id_wraps_rather_than_widening_the_chat(qtbot) -> None:
    # A 40-character call id made the line 481 px wide, the chat's minimum at 800x500.
    from chatapp.engine.text.chat import ToolCall
    from chatapp.gui.chat.tool_reply import ToolReplyBox

    box = ToolReplyBox()
    qtbot.addWidget(box)
    box.show_call(ToolCall(id="call_" + "9" * 35, name="get_weather", arguments="{}"))
    line = box.label.fontMetrics().horizontalAdvance(box.label.text())
    assert box.minimumSizeHint().width() < line * 3 / 4, (box.minimumSizeHint().width(), line)


def test_enter_sends_the_result_and_shift_enter_starts_a_new_line(qtbot) -> None:
    box = ToolReplyBox()
    qtbot.addWidget(box)
    box.show_call(ToolCall("call_1", "pick", '{"colour": "red"}'))
    box.edit.setFocus()
    qtbot.keyClicks(box.edit, "sunny")
    qtbot.keyClick(box.edit, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(box.edit, "21 C")
    with qtbot.waitSignal(box.sig_reply, timeout=2000) as sent:
        qtbot.keyClick(box.edit, Qt.Key.Key_Return)
    assert sent.args == ["sunny\n21 C"]
