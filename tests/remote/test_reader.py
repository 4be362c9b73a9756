"""StreamReader: the consumer gets every item as read, the reader's errors on its own thread,
and can stop waiting on a silent stream at once; an abandoned stream is closed by the reader.
Every wait is bounded."""

from __future__ import annotations

import threading
from collections.abc import Generator

import pytest

from chatapp.remote.reader import StreamReader


def test_items_and_the_end_pass_through() -> None:
    reader = StreamReader((i for i in range(5)), lambda: False, "test-reader")
    assert list(reader) == [0, 1, 2, 3, 4] and not reader.stopped
    assert reader.join(10)


def test_an_error_of_the_reader_is_raised_to_the_consumer() -> None:
    def failing() -> Generator[int, None, None]:
        yield 1
        raise ValueError("the server said no")

    reader = StreamReader(failing(), lambda: False, "test-reader")
    got: list[int] = []
    with pytest.raises(ValueError, match="the server said no"):
        for item in reader:
            got.append(item)
    assert got == [1]


def test_stop_while_the_stream_is_silent_and_the_reader_closes_it() -> None:
    release, first_sent, closed = threading.Event(), threading.Event(), threading.Event()
    stop = threading.Event()

    def silent() -> Generator[str, None, None]:
        try:
            yield "first"
            first_sent.set()
            release.wait(30)  # a read that blocks until the server speaks again
            yield "late"
            yield "never read"
        finally:
            closed.set()

    reader = StreamReader(silent(), stop.is_set, "test-reader")
    got: list[str] = []
    for item in reader:
        got.append(item)
        assert first_sent.wait(10)
        stop.set()  # the user presses Stop while the read blocks
    assert got == ["first"] and reader.stopped
    assert not closed.is_set()  # the reader is still in its read
    release.set()  # the next item arrives: the abandoned reader closes the stream
    assert closed.wait(10) and reader.join(10)
