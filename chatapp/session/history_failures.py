"""How the history sync (history_sync.py) tells of saves that fail, and where it waits for a
history another process keeps locked. No Qt.

A write waits for another instance's lock for the store's busy timeout. On the window's thread
that wait froze the window (5 s on Send with a locked history). So where the sync is given a
worker (`submit_wait`: the window's tools runner), its own writes wait only
`QUICK_BUSY_TIMEOUT_S`; a write that finds the history busy leaves the messages marked unsaved
and hands the wait to the worker (`wait_for_write_lock`, up to `NORMAL_BUSY_TIMEOUT_S`). When
the lock comes free the sync saves again, so a brief lock passes without a word; a lock held
longer is told as before, and the window's retry timer keeps trying. Without a worker (tests,
scripts) a write waits the whole timeout, as it always did.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from chatapp.session.events import Event
from chatapp.session.jobs import Job, JobControl
from chatapp.session.running import JobWatcher, Submit
from chatapp.store import HistoryStore, ReadOnlyStoreError, StoreBusyError, StoreError
from chatapp.store.history_file import wait_for_write_lock

log = logging.getLogger(__name__)
RETRY_BUSY_TIMEOUT_S = 0.1  # how long a retry waits for another process's lock
NORMAL_BUSY_TIMEOUT_S = 5.0
QUICK_BUSY_TIMEOUT_S = 0.05  # the window's thread, when a worker does the waiting


class Tell(Protocol):
    """What SaveFailures tells (two of the sync's HistoryEvents)."""

    @property
    def message(self) -> Event[[str, str]]: ...
    @property
    def unsaved_changed(self) -> Event[[]]: ...


class SaveFailures:
    """The sync's `failure`, and what is said and waited for when saving fails."""

    def __init__(
        self, tell: Tell, submit_wait: Submit | None, saved_again: Callable[[], None]
    ) -> None:
        self.tell = tell
        self.submit_wait = submit_wait
        self.saved_again = saved_again  # sync again (the lock came free)
        self.failure: str | None = None  # why the last save failed; None while all is saved
        self._told = False  # the user heard of this failure
        self._waiting = False  # a worker waits for the lock

    @property
    def busy_timeout_s(self) -> float:
        """How long a write on the caller's thread waits for another process's lock."""
        return QUICK_BUSY_TIMEOUT_S if self.submit_wait is not None else NORMAL_BUSY_TIMEOUT_S

    def failed(self, store: HistoryStore, exc: StoreError) -> None:
        self.failure = str(exc)
        if isinstance(exc, StoreBusyError) and self.submit_wait is not None and not self._told:
            if not self._waiting:  # let a worker wait for the lock, not this thread
                self._waiting = True
                watcher = JobWatcher(on_finished=self._waited, on_errored=self._wait_failed)
                self.submit_wait(_lock_wait_job(store.path), watcher)
            self.tell.unsaved_changed.emit()
            return
        self._tell(store, exc)
        self.tell.unsaved_changed.emit()

    def succeeded(self, store: HistoryStore) -> None:
        if self.failure is None:
            return
        self.failure = None
        with contextlib.suppress(StoreError):
            store.set_busy_timeout(self.busy_timeout_s)
        if self._told:
            self.tell.message.emit("The chat history works again: every message is saved.", "info")
        self._told = False
        self.tell.unsaved_changed.emit()

    def _waited(self, free: object) -> None:
        """The worker's wait ended: save again if the lock came free; say so if not saved."""
        self._waiting = False
        if self.failure is None:
            return  # a retry saved everything meanwhile
        if free:
            self.saved_again()
        if self.failure is not None and not self._told:
            self._tell(None, StoreBusyError(self.failure))
            self.tell.unsaved_changed.emit()

    def _wait_failed(self, _error: object) -> None:
        self._waited(False)

    def _tell(self, store: HistoryStore | None, exc: StoreError) -> None:
        if self._told:
            return
        self._told = True
        if isinstance(exc, ReadOnlyStoreError):
            self.tell.message.emit(
                "This chat is not saved: the chat history is read-only. Its messages stay "
                "here, marked “not saved”; closing the window offers to export them.",
                "warning",
            )
            return
        if store is not None:  # retries must not freeze the window for the whole timeout
            with contextlib.suppress(StoreError):
                store.set_busy_timeout(RETRY_BUSY_TIMEOUT_S)
        self.tell.message.emit(
            f"{exc} The messages not saved stay here, marked “not saved”; chatapp tries "
            "again every few seconds.",
            "error",
        )


def _lock_wait_job(path: Path) -> Job:
    def run(_control: JobControl) -> bool:
        return wait_for_write_lock(path, NORMAL_BUSY_TIMEOUT_S)

    return Job("history lock wait", run)
