"""Reads a blocking stream on a thread of its own, so that its consumer can stop waiting at once.

A socket read cannot be interrupted portably from another thread. Without this, a server that
accepts the request and then goes silent (queued, a long prefill, hung) keeps Stop, and the
window's close, waiting for the read timeout (two minutes by default). Here a reader thread
pulls the items and hands them over a queue; the consumer waits on the queue and asks
`should_stop` while it waits. Abandoned, the reader closes the stream at its next item (the
server then sees the client leave) or ends with the read's own timeout or error, which nobody
reads any more. Items arrive as soon as they are read: the queue adds no polling delay.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")
POLL_S = 0.05  # how often a waiting consumer asks should_stop


class _End:
    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error


class StreamReader(Generic[T]):
    """Iterates `items` (a generator, started on the reader thread) until it ends, raises, or
    `should_stop()` turns true while waiting; then `stopped` tells which."""

    def __init__(
        self,
        items: Generator[T, None, None],
        should_stop: Callable[[], bool],
        name: str,
        abandoned: threading.Event | None = None,
    ) -> None:
        """`abandoned`: set by `close`; a generator that also asks it between its own reads
        (RemoteClient.stream_chat) ends without waiting for its next item."""
        self.should_stop = should_stop
        self.stopped = False
        self._items = items
        self._queue: queue.SimpleQueue[T | _End] = queue.SimpleQueue()
        self._abandoned = abandoned or threading.Event()
        self._thread = threading.Thread(target=self._read, name=name, daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[T]:
        while True:
            try:
                item = self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if self.should_stop():
                    self.stopped = True
                    self.close()
                    return
                continue
            if isinstance(item, _End):
                if item.error is not None:
                    raise item.error
                return
            yield item

    def close(self) -> None:
        """Stop consuming; the reader closes the stream at its next item."""
        self._abandoned.set()

    def join(self, timeout: float) -> bool:
        """Wait for the reader thread (tests); True once it has ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _read(self) -> None:
        try:
            for item in self._items:
                if self._abandoned.is_set():
                    return
                self._queue.put(item)
            self._queue.put(_End())
        except BaseException as exc:  # handed to the consumer, raised on its thread
            self._queue.put(_End(exc))
        finally:
            self._items.close()  # on this thread: a running generator cannot be closed elsewhere
