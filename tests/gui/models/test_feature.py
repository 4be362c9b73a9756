"""The models feature answers the frame's File menu: a chosen folder loads, Models… opens the
library; the window itself builds neither."""

from __future__ import annotations

from pathlib import Path

from chatapp.gui.chat.controller import State
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.models.feature import ModelsFeature
from chatapp.gui.models.library import ModelsDialog
from tests.gui.conftest import LOAD_TIMEOUT_MS, WindowFactory


def test_the_file_menu_is_answered_by_the_models_feature(
    qtbot, make_window: WindowFactory, tiny_model_dir: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.feature(ModelsFeature) is not None
    emit(window.menus.sig_open_folder, tiny_model_dir)  # what Open model folder… sends
    assert window.chat.controller.backend_session.state is State.LOADING
    qtbot.waitUntil(
        lambda: window.chat.controller.backend_session.state is State.READY, timeout=LOAD_TIMEOUT_MS
    )
    window.menus.models_action.trigger()
    dialog = window.findChild(ModelsDialog)
    assert isinstance(dialog, ModelsDialog) and dialog.isVisible()
    dialog.close()
