"""File > Open GGUF: the conversion (a job of the chat controller, on the window's tool runner),
its progress dialog, then the converted folder opened."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QWidget

from chatapp.datadir import models_dir
from chatapp.engine.devices import attention_for
from chatapp.engine.model_description import is_cpu
from chatapp.gui.chat.controller import ChatController
from chatapp.gui.common.progress import ConversionProgressDialog
from chatapp.store.model_library import folder_name


class GgufConversion(QObject):
    def __init__(
        self,
        window: QWidget,
        controller: ChatController,
        status: Callable[[str, int], None],  # a status-bar line for that many ms (0: kept)
        show_message: Callable[[str, str], None],  # the banner: text, level
        open_model: Callable[[Path], object],
        device: Callable[[], str] = lambda: "cpu",  # the side panel's device
    ) -> None:
        super().__init__(window)
        self.device = device
        self.controller = controller
        self.status = status
        self.show_message = show_message
        self.open_model = open_model
        self.progress = ConversionProgressDialog(
            window,
            "convertProgressDialog",
            "Open GGUF",
            "Converting for ONNX Runtime: {message}…\n{left}",
            controller.backend_session.cancel_conversion,
        )
        controller.backend_session.events.convert_progress.connect(self._on_progress)
        controller.backend_session.events.convert_planned.connect(self.progress.set_note)
        controller.backend_session.events.converted.connect(self._on_converted)
        controller.backend_session.events.convert_failed.connect(self._on_failed)

    def convert_and_open(self, gguf: Path | str, out_dir: Path | str | None = None) -> bool:
        """Convert a GGUF file off the GUI thread (with a progress dialog), then open it."""
        gguf = Path(gguf).expanduser()
        target = Path(out_dir) if out_dir else models_dir() / folder_name(gguf)
        device = self.device()
        if not self.controller.backend_session.convert_gguf(
            gguf, target, graph_for(device), attention_for(device)
        ):
            return False
        self.progress.open(f"Converting {gguf.name} for ONNX Runtime…")
        self.status(f"Converting {gguf.name}…", 0)
        return True

    @Slot(float, str)
    def _on_progress(self, fraction: float, message: str) -> None:
        if self.progress.dialog is not None:  # not after Cancel or the end
            self.progress.report(fraction, message)

    @Slot(object)
    def _on_converted(self, folder: Path) -> None:
        self.progress.close()
        self.status(f"Converted into {folder}", 5000)
        self.open_model(folder)

    @Slot(str)
    def _on_failed(self, message: str) -> None:
        self.progress.close()
        self.status("", 0)  # no "Converting x.gguf…" left beside the error
        self.show_message(message, "error")


def graph_for(device: str) -> str:
    """The graph(s) the window converts into: on the CPU the native graph where chatapp's GGUF
    kernels run (auto); for another device the stock graph too, which that device runs (and
    the native one for when the CPU is chosen later)."""
    return "auto" if is_cpu(device) else "both"
