"""What the session layer tells, declared once: typed events with no Qt.

Each `Event[[A, B]]` is one thing that happens, with the arguments its callbacks get; mypy
checks both ends (`emit` and `connect`) against that one declaration. A group of events
(`ChatEvents`, `BackendEvents`, `HistoryEvents`) is what one object tells. Callbacks run in
the order they were connected, on the thread that emits, unless the group was given a
`Deliver` (`deliver_via`): the window gives one that moves a call made off its thread onto
it (gui/common/gui_thread.py), in that one place for every event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, ParamSpec

P = ParamSpec("P")

# Runs a call now or later, on the thread it chooses (None: now, on the emitting thread).
Deliver = Callable[[Callable[[], None]], None]


class Event(Generic[P]):
    """One declared event; `connect` a callback, `emit` calls every one."""

    __slots__ = ("_callbacks", "_deliver", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._callbacks: list[Callable[P, object]] = []
        self._deliver: Deliver | None = None

    def connect(self, callback: Callable[P, object]) -> Callable[P, object]:
        self._callbacks.append(callback)
        return callback

    def disconnect(self, callback: Callable[P, object]) -> None:
        """Raises ValueError when `callback` is not connected (as Qt's raises)."""
        self._callbacks.remove(callback)

    def emit(self, *args: P.args, **kwargs: P.kwargs) -> None:
        if self._deliver is None:
            self._call(*args, **kwargs)
        else:
            self._deliver(lambda: self._call(*args, **kwargs))

    def _call(self, *args: P.args, **kwargs: P.kwargs) -> None:
        for callback in list(self._callbacks):  # one may disconnect itself
            callback(*args, **kwargs)

    def __repr__(self) -> str:
        return f"Event({self.name!r}, {len(self._callbacks)} connected)"


class EventGroup:
    """The events one object tells, as attributes; `deliver_via` applies to all of them."""

    def events(self) -> list[Event[...]]:
        return [value for value in vars(self).values() if isinstance(value, Event)]

    def deliver_via(self, deliver: Deliver | None) -> None:
        for event in self.events():
            event._deliver = deliver
