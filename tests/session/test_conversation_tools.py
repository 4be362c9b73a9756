"""A chat's tool calls and results reach the next prompt as the template expects, rendered by
the one path the server uses too: the window's request and the same chat sent to the API give
the same prompt ids, with a template that knows tools and with one that does not."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import ChatTokenizer, Message, ToolCall
from chatapp.server.request_body import parse_chat
from chatapp.session.answer import AnswerRequest, answer
from chatapp.session.chat_jobs import answer_request
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.conversation import ChatMessage, Conversation
from chatapp.session.model_jobs import EngineHost
from tests.tiny_model import tiny_folder_with_template

pytest.importorskip("llguidance", reason="tool calling needs llguidance")

# Qwen 2.5's way, cut to its bones (tests/engine/test_tool_calls.py has the same).
HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}"
    "{% endfor %}</tools><|im_end|>\n{%- endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n"
    "</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
SETTINGS = SamplingSettings(temperature=0.0, max_new_tokens=1)


@pytest.fixture(scope="module")
def hermes_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_folder_with_template(tmp_path_factory.mktemp("hermes"), HERMES_TEMPLATE)


def _chat() -> Conversation:
    """A question, the model's call, the tool's result as the user typed it."""
    conv = Conversation()
    conv.add_user("Weather in Paris?")
    conv.messages.append(ChatMessage("assistant", "", tool_calls=(CALL,)))
    conv.add_tool_result(CALL, "18 C and sunny")
    return conv


API_BODY: dict[str, Any] = {
    "messages": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
    ]
}


def _prompt_ids(
    engine: Engine, request: AnswerRequest, monkeypatch: pytest.MonkeyPatch
) -> list[int]:
    """The ids the engine was given for `request`'s answer (the last prompt rendered)."""
    seen: list[list[int]] = []
    real = ChatTokenizer.chat_ids

    def spy(self: ChatTokenizer, *args: Any, **kwargs: Any) -> list[int]:
        ids = real(self, *args, **kwargs)
        seen.append(ids)
        return ids

    monkeypatch.setattr(ChatTokenizer, "chat_ids", spy)
    host = EngineHost()
    host.engine = engine
    list(answer(host.backend(), request, lambda: False))
    monkeypatch.undo()
    return seen[-1]


def _both(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], list[int]]:
    messages = tuple(_chat().engine_messages("Use tools."))
    window = answer_request(messages, GenerationOptions(SETTINGS, Mode.IOBINDING))
    served = parse_chat(API_BODY, "iobinding", 2048).answer
    served = replace(served, settings=SETTINGS)
    assert served.messages == messages  # the same structured chat from both faces
    return _prompt_ids(engine, window, monkeypatch), _prompt_ids(engine, served, monkeypatch)


def test_a_tool_template_gets_the_call_and_the_result_as_the_server_sends_them(
    hermes_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(hermes_dir, threads=1)
    window, served = _both(engine, monkeypatch)
    assert window == served
    prompt = engine.tokenizer.decode(window)  # without the control tokens
    assert prompt == (
        "system\nUse tools.\nuser\nWeather in Paris?\nassistant\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        "tool\n18 C and sunny\nassistant\n"
    )


def test_a_template_without_tools_gets_them_as_plain_turns(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ChatML without tools: the call as its JSON text in the answer's turn, the result as a
    user turn that names the call (engine/structured/tool_calls.py ToolPlan._plain), from both
    faces."""
    engine = Engine(tiny_model_dir, threads=1)
    assert not engine.tokenizer.tools_in_template()
    window, served = _both(engine, monkeypatch)
    assert window == served
    prompt = engine.tokenizer.decode(window)  # without the control tokens
    assert prompt == (
        "system\nUse tools.\nuser\nWeather in Paris?\nassistant\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "user\nTool result (call_1):\n18 C and sunny\nassistant\n"
    )


def test_the_chat_waits_for_every_call_of_an_answer_in_turn() -> None:
    other = ToolCall("call_2", "get_time", "{}")
    conv = Conversation()
    conv.add_user("Weather and time?")
    assert conv.pending_call() is None
    conv.add_answer("", None, tool_calls=(CALL, other))
    assert conv.pending_call() == CALL
    conv.add_tool_result(CALL, "18 C")
    assert conv.pending_call() == other
    conv.add_tool_result(other, "14:00")
    assert conv.pending_call() is None
    roles = [(m.role, m.tool_call_id, m.tool_name) for m in conv.messages]
    assert roles[2:] == [("tool", "call_1", "get_weather"), ("tool", "call_2", "get_time")]
    sent = conv.engine_messages()
    assert sent[1] == Message("assistant", "", (CALL, other))
    assert sent[3] == Message("tool", "14:00", tool_call_id="call_2")
    conv.add_answer("Sunny at two.", None)
    assert conv.pending_call() is None


def test_a_server_is_sent_the_calls_as_the_api_carries_them() -> None:
    """A chat with a remote server sends the call's arguments as JSON text (OpenAI's form,
    which chatapp serve requires), and the server reads back the same chat."""
    messages = tuple(_chat().engine_messages("Use tools."))
    body = {"messages": [m.as_dict(api=True) for m in messages]}
    assert body["messages"][2]["tool_calls"][0]["function"]["arguments"] == CALL.arguments
    assert parse_chat(body, "iobinding", 2048).answer.messages == messages


def test_a_call_is_counted_as_its_own_turn_not_as_an_empty_answer() -> None:
    """The context counter remembers short turns: a call (no text) is not an empty answer,
    nor is one tool's result another's."""
    from chatapp.session.context import TokenCounter

    def count(messages: list[Message]) -> int:  # a call and a result's id cost tokens
        return sum(
            len(m.content) + 10 * len(m.tool_calls) + len(m.tool_call_id or "") for m in messages
        )

    counter = TokenCounter(count)
    assert counter([Message("assistant", "")]) == 0
    assert counter([Message("assistant", "", (CALL,))]) == 10
    assert counter([Message("tool", "18", tool_call_id="call_1")]) == 8
    assert counter([Message("tool", "18", tool_call_id="call_22")]) == 9
