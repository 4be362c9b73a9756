"""Chat or text continuation, and stop strings as a person types them."""

from __future__ import annotations

import pytest

from chatapp.engine.text.chat import (
    PLAIN_CHAT_STOPS,
    STYLE_CONTINUE,
    STYLE_PLAIN_CHAT,
    STYLE_TEMPLATE,
)
from chatapp.session import prompt_style as ps


def test_a_base_model_continues_text_and_chats_in_plain_lines() -> None:
    assert ps.default_choice(has_chat_template=False) == ps.CONTINUE
    assert ps.default_choice(has_chat_template=True) == ps.CHAT
    assert ps.engine_style(ps.CONTINUE, False) == STYLE_CONTINUE
    assert ps.engine_style(ps.CHAT, False) == STYLE_PLAIN_CHAT
    assert ps.engine_style(ps.CHAT, True) == STYLE_TEMPLATE
    assert ps.engine_style(ps.CONTINUE, True) == STYLE_CONTINUE


def test_plain_line_chat_adds_the_stops_that_end_invented_turns() -> None:
    assert ps.answer_stops(("END",), STYLE_PLAIN_CHAT) == ("END", *PLAIN_CHAT_STOPS)
    assert "\nUser:" in ps.answer_stops((), STYLE_PLAIN_CHAT)
    assert ps.answer_stops(("END",), STYLE_TEMPLATE) == ("END",)
    assert ps.answer_stops(("\nUser:",), STYLE_PLAIN_CHAT).count("\nUser:") == 1


@pytest.mark.parametrize(
    ("typed", "stops"),
    [
        ("", ()),
        ("END", ("END",)),
        (r"\nUser:, \nAssistant:", ("\nUser:", "\nAssistant:")),
        (r"a\,b, c\\d", ("a,b", "c\\d")),
        ("x, , x", ("x",)),
        (r"\t", ("\t",)),
    ],
)
def test_stop_strings_read_as_typed_and_back(typed: str, stops: tuple[str, ...]) -> None:
    assert ps.parse_stops(typed) == stops
    assert ps.parse_stops(ps.format_stops(stops)) == stops


def test_too_many_or_too_long_stop_strings_are_refused_in_a_sentence() -> None:
    with pytest.raises(ValueError, match="At most 8"):
        ps.parse_stops(",".join(str(i) for i in range(9)))
    with pytest.raises(ValueError, match="at most 200 characters"):
        ps.parse_stops("x" * 201)


def test_the_note_says_what_the_model_is_sent() -> None:
    assert "as it is" in ps.describe(ps.CONTINUE, False)
    assert "User:" in ps.describe(ps.CHAT, False)
    assert "template" in ps.describe(ps.CHAT, True)
    assert "base model" in ps.BASE_MODEL_NOTICE
