"""Tool calling in the engine: prompt formats, the call grammar, parsing and streaming."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.sampling import GREEDY, SamplingSettings
from chatapp.engine.structured.constraints import ConstraintError, OutputFormat
from chatapp.engine.structured.tool_calls import (
    GENERIC,
    HERMES,
    LLAMA,
    MAX_PARALLEL_CALLS,
    Tool,
    ToolChoice,
    ToolPlan,
    argument_schema,
    call_format,
)
from chatapp.engine.text.chat import Message, ToolCall
from tests.hostile_schemas import accepts
from tests.tiny_model import tiny_folder_with_template

pytest.importorskip("llguidance", reason="tool calling needs llguidance")

# Qwen 2.5's way, cut to its bones: tools in a system block, calls in <tool_call> tags.
HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n<tools>{% for t in tools %}{{ t | tojson }}"
    '{% endfor %}</tools>\nCall with <tool_call>\n{"name": ..., "arguments": ...}\n'
    "</tool_call><|im_end|>\n{%- endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n"
    "</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
ZONE = Tool(
    "zone",
    "A time zone.",
    {
        "type": "object",
        "properties": {"hours": {"type": "integer", "minimum": -12, "maximum": 14}},
        "required": ["hours"],
        "additionalProperties": False,
    },
)
FLAG = Tool(
    "flag", "", {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]}
)
ASK = [Message("user", "Which zone?")]


@pytest.fixture(scope="module")
def hermes_engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    """The tiny model with room for the tools (a token per character) and Qwen's format."""
    folder = tiny_folder_with_template(tmp_path_factory.mktemp("hermes"), HERMES_TEMPLATE)
    return Engine(folder, threads=1)


def test_formats_follow_the_template() -> None:
    assert call_format("... <tool_call> ... tools ...", native=True) == HERMES
    llama = 'Respond in the format {"name": function name, "parameters": dictionary}'
    assert call_format(llama, native=True) == LLAMA
    assert call_format("anything", native=False) == GENERIC


def test_a_native_template_gets_the_tools_and_answers_in_its_format(hermes_engine: Engine) -> None:
    tokenizer = hermes_engine.tokenizer
    assert tokenizer.supports_tools
    plan = ToolPlan([ZONE, FLAG], ToolChoice("required"), tokenizer.template_source, True)
    prompt = tokenizer.render(plan.messages(ASK), tools=plan.template_tools())
    assert '"name": "zone"' in prompt and "<tools>" in prompt
    for mode in ("naive", "iobinding"):
        gen = hermes_engine.chat(
            plan.messages(ASK),
            replace(GREEDY, max_new_tokens=80),
            mode,
            output_format=plan.output_format(),
            tools=plan.template_tools(),
        )
        stats = gen.run()
        assert stats.finish_reason == "eos", (stats.prompt_tokens, gen.text)
        assert gen.text.startswith("<tool_call>\n{") and gen.text.endswith("}\n</tool_call>")
        content, (call,) = plan.parse(gen.text)
        assert content == "" and call.name in ("zone", "flag")


def test_a_history_with_calls_renders_through_the_template(hermes_engine: Engine) -> None:
    history = [
        *ASK,
        Message("assistant", "", tool_calls=(ToolCall("call_1", "zone", '{"hours": 2}'),)),
        Message("tool", "done", tool_call_id="call_1"),
    ]
    text = hermes_engine.tokenizer.render(history)
    assert '<tool_call>\n{"name": "zone", "arguments": {"hours": 2}}\n</tool_call>' in text
    assert "<|im_start|>tool\ndone" in text


def test_generic_prompts_describe_tools_and_flatten_the_history() -> None:
    plan = ToolPlan([ZONE], ToolChoice("auto"), "no tools here", native=False)
    history = [
        Message("system", "Be brief."),
        *ASK,
        Message("assistant", "", tool_calls=(ToolCall("call_1", "zone", '{"hours": 2}'),)),
        Message("tool", "ok", tool_call_id="call_1"),
    ]
    system, _, call, result = plan.messages(history)
    assert system.role == "system" and system.content.startswith("Be brief.")
    assert '"name":"zone"' in system.content
    assert call == Message("assistant", '{"name": "zone", "arguments": {"hours": 2}}')
    assert result.role == "user" and "ok" in result.content and "call_1" in result.content
    assert plan.template_tools() is None
    none = ToolPlan([ZONE], ToolChoice("none"), "", native=False)
    assert none.output_format() is None and none.messages(ASK) == list(ASK)


def test_a_named_choice_must_be_a_listed_tool() -> None:
    with pytest.raises(ValueError, match="not among"):
        ToolPlan([ZONE], ToolChoice("named", "other"), "", native=False)


@pytest.mark.parametrize("native", [False, True])
def test_streamed_pieces_rebuild_the_call(native: bool) -> None:
    template = HERMES_TEMPLATE if native else ""
    plan = ToolPlan([ZONE], ToolChoice("required"), template, native)
    call = ToolCall("x", "zone", '{"hours":-3}')
    text = plan.call_text(call).replace(", ", ",").replace(": ", ":")
    stream = plan.stream()
    pieces = [p for ch in text for p in stream.push(ch)] + stream.finish()
    first, rest = pieces[0], pieces[1:]
    assert first.name == "zone" and first.call_id and first.arguments == ""
    assert "".join(p.arguments or "" for p in rest) == '{"hours":-3}'
    (made,) = stream.calls()
    assert made.id == first.call_id and json.loads(made.arguments) == {"hours": -3}


def test_text_streams_as_content_and_is_no_call() -> None:
    plan = ToolPlan([ZONE], ToolChoice("auto"), "", native=False)
    stream = plan.stream()
    pieces = [p for ch in "Sunny, 20 C" for p in stream.push(ch)] + stream.finish()
    assert "".join(p.content for p in pieces) == "Sunny, 20 C"
    assert stream.calls() == () and plan.parse("Sunny")[1] == []


def test_auto_lets_the_model_choose(tiny_model_dir: Path) -> None:
    engine = Engine(tiny_model_dir, threads=1)
    plan = ToolPlan([ZONE], ToolChoice("auto"), engine.tokenizer.template_source, False)
    for seed in range(4):
        settings = SamplingSettings(temperature=1.0, seed=seed, max_new_tokens=40)
        gen = engine.chat(plan.messages(ASK), settings, output_format=plan.output_format())
        gen.run()
        content, calls = plan.parse(gen.text)
        assert calls or not content.lstrip().startswith("{")


# Phi-4-mini's template, as published: the tools are a JSON string in the system message.
PHI4_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and "
    "message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + "
    "'<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + "
    "message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)


def test_phi4_mini_gets_the_tools_in_its_system_block(tiny_model_dir: Path) -> None:
    plan = ToolPlan([ZONE], ToolChoice("required"), PHI4_TEMPLATE, native=True)
    assert plan.template_tools() is None
    history = [
        *ASK,
        Message("assistant", "", tool_calls=(ToolCall("call_1", "zone", '{"hours": 2}'),)),
        Message("tool", "ok", tool_call_id="call_1"),
    ]
    system, _, call, result = plan.messages(history)
    assert system.role == "system" and json.loads(system.tools or "")[0]["name"] == "zone"
    assert call == Message("assistant", '{"name": "zone", "arguments": {"hours": 2}}')
    assert result.role == "tool"
    from chatapp.engine.text.template import ChatTemplate

    text = ChatTemplate(PHI4_TEMPLATE).render(
        messages=[m.as_dict() for m in plan.messages(ASK)], add_generation_prompt=True
    )
    assert text.startswith('<|system|><|tool|>[{"name": "zone"') and "<|/tool|>" in text


def test_a_call_cut_short_keeps_its_arguments_so_far() -> None:
    plan = ToolPlan([ZONE], ToolChoice("required"), "", native=False)
    stream = plan.stream()
    pieces = stream.push('{"name":"zone","arguments":{"hou') + stream.finish()
    (call,) = stream.calls()
    assert call.name == "zone" and call.arguments == '{"hou'
    assert "".join(p.arguments or "" for p in pieces) == '{"hou'


ADDRESS_TOOL = Tool(  # openai.pydantic_function_tool's shape: a nested model under $defs
    "ship",
    "",
    {
        "$defs": {
            "Address": {
                "properties": {"city": {"type": "string", "maxLength": 8}},
                "required": ["city"],
                "type": "object",
            }
        },
        "properties": {"to": {"$ref": "#/$defs/Address"}, "count": {"type": "integer"}},
        "required": ["to", "count"],
        "type": "object",
    },
)


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> Engine:
    return Engine(tiny_model_dir, threads=1)


def grammar(engine: Engine, plan: ToolPlan, answer: OutputFormat | None = None) -> Any:
    fmt = plan.output_format(answer)
    assert fmt is not None
    return lambda: engine.constraints.start(fmt)


def test_refs_resolve_against_the_tools_own_parameters(tiny: Engine) -> None:
    plan = ToolPlan([ZONE, ADDRESS_TOOL], ToolChoice("required"), "", native=False)
    start = grammar(tiny, plan)
    assert accepts(tiny, start(), '{"name":"ship","arguments":{"to":{"city":"Oslo"},"count":2}}')
    assert not accepts(tiny, start(), '{"name":"ship","arguments":{"to":{"city":"Oslo","x')
    assert not accepts(tiny, start(), '{"name":"ship","arguments":{"to":{"city":"Oslo"},"z')


def test_arguments_are_always_an_object() -> None:
    assert argument_schema({"properties": {}})["type"] == "object"
    assert argument_schema({})["type"] == "object"
    for parameters in ({"type": "string"}, {"type": ["object", "null"]}, {"type": "array"}):
        with pytest.raises(ConstraintError, match="JSON object"):
            argument_schema(parameters)


def test_several_calls_only_when_parallel(tiny: Engine) -> None:
    call = '{"name":"zone","arguments":{"hours":3}}'
    one = grammar(tiny, ToolPlan([ZONE], ToolChoice("required"), "", native=False))
    several = grammar(
        tiny, ToolPlan([ZONE], ToolChoice("required", parallel=True), "", native=False)
    )
    assert accepts(tiny, several(), f"{call}\n{call}\n{call}")
    assert accepts(tiny, one(), call) and not accepts(tiny, one(), f"{call}\n")
    limit = "\n".join([call] * MAX_PARALLEL_CALLS)
    assert accepts(tiny, several(), limit) and not accepts(tiny, several(), limit + "\n")


def test_tools_with_a_response_format_answer_a_call_or_that_json(tiny: Engine) -> None:
    plan = ToolPlan([ZONE], ToolChoice("auto"), "", native=False)
    answer = OutputFormat.json_schema(
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    )
    start = grammar(tiny, plan, answer)
    assert accepts(tiny, start(), '{"city":"Rome"}')
    assert accepts(tiny, start(), '{"name":"zone","arguments":{"hours":1}}')
    assert not accepts(tiny, start(), "Rome")
    assert not accepts(tiny, start(), '{"city":"Rome","x')  # closed, as any response_format
    content, calls = plan.parse('{"city":"Rome"}')
    assert content == '{"city":"Rome"}' and calls == []
