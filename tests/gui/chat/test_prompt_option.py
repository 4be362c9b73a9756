"""The sampling box's prompt rows: chat or text continuation, and stop strings as typed."""

from __future__ import annotations

from chatapp.engine.text.chat import (
    PLAIN_CHAT_STOPS,
    STYLE_CONTINUE,
    STYLE_PLAIN_CHAT,
    STYLE_TEMPLATE,
)
from chatapp.gui.chat.prompt_option import PromptOption
from chatapp.session import prompt_style as ps


def _option(qtbot) -> PromptOption:
    option = PromptOption()
    qtbot.addWidget(option)
    return option


def test_a_base_model_continues_and_a_chat_model_chats(qtbot) -> None:
    option = _option(qtbot)
    option.set_chat_template(False)
    assert option.choice() == ps.CONTINUE and option.prompt_style() == STYLE_CONTINUE
    assert "as it is" in option.choice_note.text()
    option.choice_combo.setCurrentIndex(option.choice_combo.findData(ps.CHAT))
    assert option.prompt_style() == STYLE_PLAIN_CHAT
    assert option.stops() == PLAIN_CHAT_STOPS  # the turns it invents end the answer
    assert "User:" in option.choice_note.text()
    option.set_chat_template(True)
    assert option.choice() == ps.CHAT and option.prompt_style() == STYLE_TEMPLATE
    assert option.stops() == ()


def test_stop_strings_are_read_as_typed_and_announced_once_typing_pauses(qtbot) -> None:
    option = _option(qtbot)
    with qtbot.waitSignal(option.sig_changed, timeout=2000):
        option.stops_edit.setText(r"END, \nUser:")
    assert option.user_stops() == ("END", "\nUser:") and option.stops_note.isHidden()
    option.stops_edit.setText(",".join("abcdefghi"))  # nine: one too many
    assert not option.stops_note.isHidden() and "At most 8" in option.stops_note.text()
    assert option.user_stops() == ("END", "\nUser:")  # the last good ones stay


def test_a_chat_state_is_shown_without_being_announced(qtbot) -> None:
    option = _option(qtbot)
    with qtbot.assertNotEmitted(option.sig_changed):
        option.set_state(ps.CONTINUE, ("a,b", "\n"))
    assert option.stops_edit.text() == r"a\,b, \n" and option.user_stops() == ("a,b", "\n")
    assert not option._pending.isActive()  # nothing to announce after the typing pause


def test_the_same_model_reloaded_keeps_the_choice_another_model_gets_its_default(qtbot) -> None:
    option = _option(qtbot)
    option.set_chat_template(False, "/models/base")
    option.choice_combo.setCurrentIndex(option.choice_combo.findData(ps.CHAT))
    option.set_chat_template(False, "/models/base")  # another device or thread count
    assert option.choice() == ps.CHAT
    option.set_chat_template(False, "/models/other-base")
    assert option.choice() == ps.CONTINUE
