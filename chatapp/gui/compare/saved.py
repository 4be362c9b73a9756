"""The comparison view's last results at start: the saved file checked whole first
(store/compare_results.read_saved moves a damaged one aside and says so in one line), and
results that pass the check but still fail to draw leave the view empty, with their line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtWidgets import QLabel

from chatapp.store.compare_results import ReadResults, SavedResults, read_saved

log = logging.getLogger(__name__)


class SavedView(Protocol):
    """What of the comparison view this needs (view.py imports this module)."""

    compared: dict[str, Any] | None
    result: dict[str, Any] | None
    sweep_header: dict[str, Any] | None
    sweep_points: list[dict[str, Any]]
    status: QLabel

    def show_saved(self, saved: SavedResults) -> None: ...
    def _update_buttons(self) -> None: ...


def show_saved_file(view: SavedView, path: Path) -> None:
    read = read_saved(path)
    try:
        if read.results is not None:
            view.show_saved(read.results)
    except Exception as exc:  # the view must open whatever the file held
        log.exception("the saved comparison %s could not be shown", path)
        view.compared = view.result = view.sweep_header = None
        view.sweep_points.clear()
        view._update_buttons()
        read = ReadResults(None, f"{path} could not be shown ({type(exc).__name__}).")
    if read.notice:
        view.status.setText(read.notice)
