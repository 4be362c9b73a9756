"""Loading a model for the chat: the folder asked for goes to the controller with the side
panel's device, threads and loop; a loaded model is shown (status bar, window title, the side
panel's device, context and suggested sampling, a notice in the banner) and remembered (the
recent menu, the last model, how long it took to load); a failed load is told in one sentence.
A new device, thread count or precision reloads the same model; the precision is remembered
for each model and shown before it loads (gui/chat/feature.py builds this)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Slot

from chatapp.gui.chat.controller import ChatController, State
from chatapp.gui.chat.side_panel import SidePanel
from chatapp.gui.common.load_memory import (
    last_load_seconds,
    load_key,
    remember_last_model,
    remember_load_seconds,
    remember_precision,
    remembered_precision,
)
from chatapp.gui.common.settings import remember_recent
from chatapp.gui.window.menus import RECENT_KEY
from chatapp.session import formatting as fmt
from chatapp.session.loop_notes import NO_PRECISION_CHOICE
from chatapp.session.model_jobs import ModelSummary

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow


class ModelLoading(QObject):
    def __init__(self, window: MainWindow, controller: ChatController, panel: SidePanel) -> None:
        super().__init__(window)
        self.window = window
        self.controller = controller
        self.panel = panel
        self.model_dir: Path | None = None  # the folder last asked for
        self.onnx_file: str | None = None  # and the graph in it, if one was named
        self._load_key: str | None = None  # the load under way, to remember how long it took
        controller.backend_session.events.model_loaded.connect(self._on_model_loaded)
        controller.backend_session.events.load_failed.connect(self._on_load_failed)
        panel.sig_mode_changed.connect(self._on_mode_changed)
        panel.sig_device_changed.connect(self._on_engine_setting_changed)
        panel.sig_threads_changed.connect(self._on_engine_setting_changed)
        panel.sig_precision_changed.connect(self._on_precision_changed)
        panel.sig_speculative_changed.connect(controller.backend_session.host.set_speculative)
        controller.backend_session.host.set_speculative(panel.speculative())

    def open_model(
        self, folder: Path | str, device: str | None = None, onnx_file: str | None = None
    ) -> bool:
        """Load `folder` in the worker (returns at once). `device` overrides the selector once
        (the command line's --device, which may name a device this machine lacks); `onnx_file`
        picks one of the folder's graphs (--onnx-file; None: the folder's default)."""
        folder = Path(folder).expanduser()
        panel = self.panel
        if self.controller.backend_session.busy:
            return False  # the choice shown stays the loaded model's
        panel.set_precision(remembered_precision(self.window.settings, folder))
        started = self.controller.backend_session.open_model(
            folder,
            device or panel.device(),
            panel.threads(),
            panel.mode(),
            onnx_file,
            panel.precision(),
        )
        if started:
            self.model_dir = folder
            self.onnx_file = onnx_file
            self._load_key = load_key(folder, onnx_file, device or panel.device())
            expected = last_load_seconds(self.window.settings, self._load_key)
            self.window.busy.start(f"Loading {folder.name}", expected)
        return started

    @Slot(object)
    def _on_model_loaded(self, summary: ModelSummary) -> None:
        window, panel = self.window, self.panel
        if self._load_key is not None and summary.load_seconds > 0:
            remember_load_seconds(window.settings, self._load_key, summary.load_seconds)
        self._load_key = None
        kernels = f" · {summary.kernels}" if summary.kernels else ""
        window.show_backend(
            f"{summary.name} · {summary.device_label}{kernels}",
            f"{summary.name} — chatapp",
            summary.description,
        )
        window.notify(f"Loaded {summary.description}", 8000)
        panel.set_fallback_reason(summary.fallback_reason)
        panel.set_precision_unavailable(None if summary.precision else NO_PRECISION_CHOICE)
        panel.set_speculative_unavailable(summary.speculation_refusal)
        panel.set_device_memory(
            summary.device_own_memory,
            summary.device_label,
            summary.kv_bytes_per_token,
            summary.device,
            summary.name,
        )
        if summary.device != summary.requested_device:
            # Show what runs (the CPU after a fallback); the saved choice stays the user's.
            panel.preselect(device=summary.device)
        panel.set_context(0, summary.max_context)
        panel.set_model_sampling(summary.sampling)
        panel.system_prompt_box.set_model_default(
            summary.default_system_prompt, summary.default_system_tokens
        )
        panel.sampling_box.prompt.set_chat_template(summary.has_chat_template, str(summary.folder))
        remember_recent(window.settings, RECENT_KEY, str(summary.folder))
        # The graph only when one was named: a folder's default depends on the device (its
        # native graph on the CPU, its stock one elsewhere).
        remember_last_model(window.settings, summary.folder, self.onnx_file or "")
        notice = summary.sampling.notice if summary.sampling is not None else None
        if summary.fallback_reason:  # a device that failed: old once an answer succeeds
            window.show_message(summary.fallback_reason, "warning", until_answer=True)
        elif not summary.has_chat_template:
            pass  # the chat says so, under the prompt choice the chat keeps (feature.py)
        elif notice:
            window.show_message(notice, "info")
        else:
            window.dismiss_message()  # the problem the banner described is solved

    @Slot(str)
    def _on_load_failed(self, message: str) -> None:
        self._load_key = None
        self.window.notify("The model could not be loaded.", 8000)
        if self.controller.backend_session.backend is not None:
            message += f" Still using {self.controller.backend_session.backend.name}."
        self.window.show_message(message, "error", until_answer=True)

    @Slot(str)
    def _on_precision_changed(self, precision: str) -> None:
        if self.model_dir is not None:
            remember_precision(self.window.settings, self.model_dir, precision)
        self._on_engine_setting_changed(precision)

    def _on_engine_setting_changed(self, _value: object) -> None:
        # Device, threads and precision live in the session: reload the same model (the chat
        # stays).
        # The side panel locks both while an answer streams, so this never lands mid-answer.
        if self.model_dir is not None and self.controller.backend_session.state in (
            State.READY,
            State.NO_MODEL,
        ):
            self.open_model(self.model_dir, onnx_file=self.onnx_file)

    @Slot(str)
    def _on_mode_changed(self, mode: str) -> None:
        self.window.notify(fmt.next_answer_loop(mode), 8000)
