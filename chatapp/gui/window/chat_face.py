"""What the window frame needs of the chat: the chat feature (gui/chat/feature.py) builds its
own widgets and controller and hands the frame this face; the frame places the two widgets,
forwards its menus' actions, and never imports the chat (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from PySide6.QtWidgets import QWidget


class ChatFace(Protocol):
    @property
    def chat_view(self) -> QWidget:
        """The transcript and the prompt box: the Chat tab, under the banner."""
        ...

    @property
    def side_panel(self) -> QWidget:
        """The figures, loop, sampling and system prompt: the scrolled pane at the right."""
        ...

    @property
    def model_dir(self) -> Path | None:
        """The model folder last asked for (File > Open starts there)."""
        ...

    def open_model(
        self, folder: Path | str, device: str | None = None, onnx_file: str | None = None
    ) -> bool: ...

    def new_chat(self) -> None: ...

    def refresh_controls(self) -> None:
        """Enable what the chat's state and the window's busy_checks allow."""
        ...

    def focus(self) -> None:
        """Put the keyboard focus in the prompt box."""
        ...

    def about_rows(self) -> list[tuple[str, str]]:
        """Help > About's lines on what answers (the model, a server)."""
        ...

    def shutdown(self) -> None:
        """Stop every job and the window's worker threads."""
        ...
