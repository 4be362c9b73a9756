"""A GGUF that cannot be converted: one clear line in the banner, and the status bar no longer
says it is converting (found driving the window: "Converting x.gguf…" stayed after the error)."""

from __future__ import annotations

from chatapp.gui.chat.controller import State
from chatapp.gui.main_window import MainWindow
from chatapp.gui.models.feature import ModelsFeature


def models_feature(window: MainWindow) -> ModelsFeature:
    feature = window.feature(ModelsFeature)
    assert feature is not None
    return feature


def test_a_file_that_is_not_gguf_leaves_no_converting_line(
    qtbot, make_window, tiny_model_dir, tmp_path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert window.chat.controller.backend_session.state is State.READY
    fake = tmp_path / "not-a-model.gguf"
    fake.write_bytes(b"hello, not a GGUF\n" * 50)
    assert models_feature(window).convert_and_open(fake, tmp_path / "out")
    assert window.statusBar().currentMessage().startswith("Converting not-a-model.gguf")
    with qtbot.waitSignal(window.chat.controller.backend_session.events.convert_failed):
        pass
    assert window.banner.isVisible()
    assert "not a GGUF file" in window.banner.text()
    assert "Converting" not in window.statusBar().currentMessage()
    assert window.chat.controller.backend_session.state is State.READY
