"""The models as a feature of the window: File > Open model folder (with the variant picker
when a folder holds several graphs), File > Open GGUF (the conversion and its progress),
File > Models and File > Get models… (the hub). The File menu's actions are the frame's; this
answers them, and opens what was chosen with the window's `open_model`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Slot

from chatapp.datadir import models_dir
from chatapp.gui.chat.feature import chat_of
from chatapp.gui.models.conversion import GgufConversion
from chatapp.gui.models.hub_dialog import GetModelsDialog
from chatapp.gui.models.library import ModelsDialog
from chatapp.gui.models.variant_picker import VariantPicker, has_choice

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow


class ModelsFeature(QObject):
    """`window.feature(ModelsFeature)` finds it."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.conversion = GgufConversion(
            window,
            chat_of(window).controller,
            window.notify,
            window.show_message,
            window.open_model,
            chat_of(window).device,
        )
        window.before_shutdown.append(self.conversion.progress.close)
        menus = window.menus
        menus.sig_open_folder.connect(self.open_model_folder)
        menus.sig_open_gguf.connect(self.convert_and_open)
        menus.models_action.triggered.connect(self.show_models_dialog)
        menus.get_models_action.triggered.connect(self.show_get_models_dialog)

    @Slot(object)
    def open_model_folder(self, folder: Path) -> bool:
        """Open `folder`; when it holds several graphs, a picker reads them (off the GUI
        thread) and asks which first. True when the load or the picker started."""
        window = self.window
        if not has_choice(folder):
            return window.open_model(folder)
        model = chat_of(window).controller.backend_session.model
        same = model is not None and model.folder.resolve() == Path(folder).resolve()
        running = model.onnx_file if model is not None and same else None
        on_cpu = chat_of(window).device() == "cpu"
        picker = VariantPicker(window.tools, folder, window, running, on_cpu)
        picker.sig_chosen.connect(lambda graph: window.open_model(folder, onnx_file=graph))
        picker.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        picker.open()
        return True

    @Slot(object)
    def convert_and_open(self, gguf: Path | str, out_dir: Path | str | None = None) -> bool:
        """Convert a GGUF file off the GUI thread (with a progress dialog), then open it."""
        return self.conversion.convert_and_open(gguf, out_dir)

    @Slot()
    def show_models_dialog(self) -> ModelsDialog:
        dialog = ModelsDialog(models_dir(), chat_of(self.window).model_dir, self.window)
        dialog.sig_open.connect(self.open_model_folder)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    @Slot()
    def show_get_models_dialog(self) -> GetModelsDialog:
        """The hub: nothing is asked of it until the user searches."""
        dialog = GetModelsDialog(models_dir(), self.window)
        dialog.sig_open.connect(self.convert_and_open)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.window.before_shutdown.append(dialog.stop)
        dialog.open()
        return dialog


def install_models(window: MainWindow) -> ModelsFeature:
    feature = ModelsFeature(window)
    window.add_feature(feature)
    return feature
