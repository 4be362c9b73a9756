"""The Tools option (gui/chat/tools_option.py): tools loaded from a JSON file, cleared, a bad
file refused with a banner sentence, and the default model's call shown as a block of its
own in the transcript."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatapp.gui.chat.tools_option import ToolsOption
from tests.gui.conftest import greedy, send_and_wait, set_sampling
from tests.weather_tool import WEATHER

pytest.importorskip("llguidance", reason="tool calling needs llguidance")


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "weather.json"
    path.write_text(json.dumps([{"type": "function", "function": WEATHER}]), encoding="utf-8")
    return path


def test_a_file_loads_its_tools_and_clear_takes_them_away(qtbot, tools_file: Path) -> None:
    option = ToolsOption()
    qtbot.addWidget(option)
    assert option.label.text() == "Tools: none" and not option.clear_button.isEnabled()
    with qtbot.waitSignal(option.sig_changed):
        assert option.load_file(tools_file)
    assert [t.name for t in option.tools()] == ["get_weather"]
    assert option.label.text() == "Tools: get_weather"
    assert "Get the current weather" in option.label.toolTip()
    option.choice_box.setCurrentIndex(option.choice_box.findData("required"))
    assert option.choice() == "required"
    with qtbot.waitSignal(option.sig_changed):
        option.clear_button.click()
    assert option.tools() == () and option.label.text() == "Tools: none"


def test_a_bad_file_changes_nothing_and_says_why(qtbot, tools_file: Path) -> None:
    option = ToolsOption()
    qtbot.addWidget(option)
    option.load_file(tools_file)
    broken = tools_file.with_name("broken.json")
    broken.write_text("[{", encoding="utf-8")
    with qtbot.waitSignal(option.sig_refused) as refused:
        assert not option.load_file(broken)
    (text,) = refused.args
    assert text.startswith("The tools were not loaded: broken.json is not valid JSON")
    assert "\n" not in text
    assert [t.name for t in option.tools()] == ["get_weather"]  # the loaded ones stay


def test_the_default_model_s_call_is_a_block_in_the_answer(
    qtbot, make_window, default_model_dir: Path, tools_file: Path
) -> None:
    window = make_window(["--model", str(default_model_dir)])
    set_sampling(window, greedy(60))
    tools = window.chat.side_panel.sampling_box.tools
    # A bad file: the banner says so, the chat is as it was.
    broken = tools_file.with_name("shape.json")
    broken.write_text('{"name": 3}', encoding="utf-8")
    tools.load_file(broken)
    assert window.banner.isVisible() and "shape.json" in window.banner.text()
    assert window.chat.conversation.messages == [] and tools.tools() == ()
    assert tools.load_file(tools_file)
    # The 135M model asked with "auto" answers in text (chatapp generate shows it): "required"
    # makes the answer a call.
    tools.choice_box.setCurrentIndex(tools.choice_box.findData("required"))
    send_and_wait(qtbot, window, "What is the weather in Paris?")
    answer = window.chat.conversation.messages[-1]
    (call,) = answer.tool_calls  # kept structured, shown as a block
    assert answer.content == "" and call.name == "get_weather"
    heading, _, block = answer.shown.partition("**Tool call: get_weather**\n\n```json\n")
    assert heading == "" and block.endswith("\n```"), answer.shown
    assert isinstance(json.loads(block.removesuffix("\n```"))["city"], str)
    shown = window.chat.chat_view.transcript.toPlainText()
    assert "Tool call: get_weather" in shown and "**" not in shown and '"city"' in shown
    settings = window.chat.conversation.settings
    assert settings is not None and [t.name for t in settings.tools] == ["get_weather"]
    assert settings.tool_choice == "required"
