"""Stop strings over a token stream: split across tokens, held back, released."""

from __future__ import annotations

from chatapp.engine.text.stops import StopBuffer


def feed(stops: tuple[str, ...], pieces: list[str]) -> tuple[str, list[int], bool]:
    buffer: StopBuffer[int] = StopBuffer(stops)
    text, items = "", []
    for i, piece in enumerate(pieces):
        out, released = buffer.push(piece, i)
        text += out
        items += released
    out, released = buffer.flush()
    return text + out, items + released, buffer.stopped


def test_without_stops_everything_passes_at_once() -> None:
    buffer: StopBuffer[int] = StopBuffer(())
    assert buffer.push("Hello", 0) == ("Hello", [0])
    assert buffer.push("", 1) == ("", [1])  # a token with no text yet still comes out


def test_a_stop_split_over_tokens_ends_the_text_before_it() -> None:
    assert feed(("END",), ["Hello ", "E", "N", "D", " more"]) == ("Hello ", [0, 1, 2, 3], True)


def test_text_that_only_looks_like_a_stop_is_released_when_it_diverges() -> None:
    buffer: StopBuffer[int] = StopBuffer(("END",))
    assert buffer.push("an E", 0) == ("an ", [])  # "E" might begin "END": held with its token
    assert buffer.push("X", 1) == ("EX", [0, 1])
    assert not buffer.stopped


def test_the_earliest_of_several_stops_wins() -> None:
    assert feed(("cd", "b"), ["abcd"]) == ("a", [0], True)


def test_held_text_is_released_at_the_end() -> None:
    assert feed(("END",), ["fin", "EN"]) == ("finEN", [0, 1], False)


def test_nothing_comes_out_after_a_stop() -> None:
    buffer: StopBuffer[int] = StopBuffer(("x",))
    buffer.push("ax", 0)
    assert buffer.push("more", 1) == ("", [])
    assert buffer.flush() == ("", [])
