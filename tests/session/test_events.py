"""session/events.py: callbacks in connection order, disconnect, and a group's delivery."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chatapp.session.events import Event, EventGroup


class Told(EventGroup):
    def __init__(self) -> None:
        self.said: Event[[str, int]] = Event("said")
        self.ended: Event[[]] = Event("ended")


def test_callbacks_run_in_the_order_they_were_connected_and_can_be_disconnected() -> None:
    told = Told()
    heard: list[tuple[str, str, int]] = []

    def first(text: str, n: int) -> None:
        heard.append(("first", text, n))

    told.said.connect(first)
    told.said.connect(lambda text, n: heard.append(("second", text, n)))
    told.said.emit("hi", 1)
    told.said.disconnect(first)
    told.said.emit("again", 2)
    assert heard == [("first", "hi", 1), ("second", "hi", 1), ("second", "again", 2)]
    with pytest.raises(ValueError):
        told.said.disconnect(first)  # not connected any more: said, as Qt says it


def test_a_callback_may_disconnect_itself_while_the_event_is_emitted() -> None:
    told = Told()
    calls: list[str] = []

    def once() -> None:
        calls.append("once")
        told.ended.disconnect(once)

    told.ended.connect(once)
    told.ended.connect(lambda: calls.append("always"))
    told.ended.emit()
    told.ended.emit()
    assert calls == ["once", "always", "always"]


def test_a_group_delivery_applies_to_every_event_of_the_group() -> None:
    told = Told()
    queued: list[Callable[[], None]] = []
    heard: list[object] = []
    told.said.connect(lambda text, n: heard.append((text, n)))
    told.ended.connect(lambda: heard.append("ended"))
    told.deliver_via(queued.append)
    told.said.emit("later", 3)
    told.ended.emit()
    assert heard == [] and len(queued) == 2  # nothing ran on the emitting call
    for call in queued:
        call()
    assert heard == [("later", 3), "ended"]
    told.deliver_via(None)
    told.ended.emit()
    assert heard[-1] == "ended" and len(heard) == 3
