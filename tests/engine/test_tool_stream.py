"""Reading calls out of an answer as it grows: several calls, brackets and quotes inside
strings, JSON answers that are not calls, and arguments identical streamed or not."""

from __future__ import annotations

import pytest

from chatapp.engine.structured.tool_stream import StreamPiece, ToolCallStream

TWO_CALLS = (
    '{"name":"find","arguments":{"q":"a } b \\" { [","n":[1,{"k":2}]}}\n'
    '{"name":"get","arguments":{}}'
)


def feed(stream: ToolCallStream, text: str, step: int) -> list[StreamPiece]:
    pieces = [p for i in range(0, len(text), step) for p in stream.push(text[i : i + step])]
    return pieces + stream.finish()


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_two_calls_stream_as_two_calls_whatever_the_chunks(step: int) -> None:
    stream = ToolCallStream("", "", "arguments")
    pieces = feed(stream, TWO_CALLS, step)
    starts = [p for p in pieces if p.call_id]
    assert [p.name for p in starts] == ["find", "get"]
    assert [p.index for p in starts] == [0, 1]
    first, second = stream.calls()
    assert first.arguments == '{"q":"a } b \\" { [","n":[1,{"k":2}]}'
    assert second.arguments == "{}"
    assert (first.id, second.id) == (starts[0].call_id, starts[1].call_id)
    for index, call in enumerate((first, second)):  # the same text, streamed or not
        assert "".join(p.arguments or "" for p in pieces if p.index == index) == call.arguments
    assert not any(p.content for p in pieces)


def test_wrapped_calls_in_hermes_tags() -> None:
    stream = ToolCallStream("<tool_call>\n", "\n</tool_call>", "arguments")
    call = '<tool_call>\n{"name":"f","arguments":{"x":1}}\n</tool_call>'
    feed(stream, call + "\n" + call, 2)
    assert [(c.name, c.arguments) for c in stream.calls()] == [("f", '{"x":1}')] * 2


def test_a_json_answer_that_is_no_call_is_content() -> None:
    for text in ('{"answer":"yes"}', '{"name":"x","value":1}', "  {}", "plain"):
        stream = ToolCallStream("", "", "arguments")
        pieces = feed(stream, text, 1)
        assert "".join(p.content for p in pieces) == text and stream.calls() == ()


def test_a_call_cut_short_keeps_what_was_streamed() -> None:
    stream = ToolCallStream("", "", "parameters")
    pieces = feed(stream, '{"name":"f","parameters":{"a":"b', 4)
    (call,) = stream.calls()
    assert call.arguments == '{"a":"b' == "".join(p.arguments or "" for p in pieces)
