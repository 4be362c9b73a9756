"""The variant picker reads a folder's graphs on the worker thread, shows how far it got, lists
them most precise first, and can be closed while it reads."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
from PySide6.QtWidgets import QDialog

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.model_folder import variants
from chatapp.engine.model_folder.variants import default_graph_name
from chatapp.engine.native_kernels import native_preferred
from chatapp.gui.chat.controller import State
from chatapp.gui.common.workers import JobRunner
from chatapp.gui.main_window import MainWindow
from chatapp.gui.models.feature import ModelsFeature
from chatapp.gui.models.variant_picker import VariantPicker, has_choice
from tests.gui.conftest import ANSWER_TIMEOUT_MS


@pytest.fixture
def three_graphs(tmp_path: Path, tiny_model_dir: Path) -> Path:
    folder = tmp_path / "variants"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "onnx").mkdir()
    shutil.copy(folder / "model.onnx", folder / "onnx" / "model_q4.onnx")
    shutil.copy(folder / "model.onnx", folder / "onnx" / "model_fp16.onnx")
    return folder


@pytest.fixture
def slow_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each graph takes 0.3 s to read, like a large one; records the thread that read it."""
    threads: list[str] = []
    real = variants.read_candidate

    def slow(folder, path):
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return real(folder, path)

    monkeypatch.setattr(variants, "read_candidate", slow)
    return threads


@pytest.fixture
def runner(qtbot) -> JobRunner:
    runner = JobRunner("PickerTestThread")
    yield runner
    assert runner.shutdown()


def _picker(qtbot, runner: JobRunner, folder: Path) -> tuple[VariantPicker, list[object]]:
    picker = VariantPicker(runner, folder)
    qtbot.addWidget(picker)
    chosen: list[object] = []
    picker.sig_chosen.connect(chosen.append)
    picker.open()
    return picker, chosen


def test_only_a_folder_with_several_graphs_asks(three_graphs: Path, tiny_model_dir) -> None:
    assert has_choice(three_graphs) and not has_choice(tiny_model_dir)
    assert not has_choice(three_graphs / "missing")


def test_the_graphs_are_read_on_the_worker_with_progress_then_listed(
    qtbot, runner: JobRunner, three_graphs: Path, slow_reads: list[str]
) -> None:
    picker, chosen = _picker(qtbot, runner, three_graphs)
    assert picker.reading and not picker.open_button.isEnabled() and picker.list.isHidden()
    qtbot.waitUntil(lambda: " of 3: " in picker.status_label.text(), timeout=5000)
    assert picker.status_label.text().startswith("Reading the graphs in variants…")
    qtbot.waitUntil(lambda: not picker.reading, timeout=10_000)
    assert set(slow_reads) == {"PickerTestThread"}  # all three, none on the GUI thread
    rows = [picker.list.item(i).text() for i in range(picker.list.count())]
    assert [r.split(" ")[0] for r in rows] == [
        "model.onnx",
        "onnx/model_fp16.onnx",
        "onnx/model_q4.onnx",
    ]
    assert " MiB) — " in rows[0] and picker.open_button.isEnabled()  # precision, size, kernels
    status = picker.status_label.text()
    assert "holds 3 variants" in status and "A variant is the same model" in status
    assert "most precise" not in status  # three copies of one graph, whatever their names
    picker.list.setCurrentRow(2)
    picker.open_button.click()
    assert chosen == ["onnx/model_q4.onnx"] and picker.result() == QDialog.DialogCode.Accepted


def test_closing_while_reading_stops_it_and_opens_nothing(
    qtbot, runner: JobRunner, three_graphs: Path, slow_reads: list[str]
) -> None:
    picker, chosen = _picker(qtbot, runner, three_graphs)
    handle = picker.handle
    assert handle is not None
    qtbot.waitUntil(lambda: len(slow_reads) >= 1, timeout=5000)
    picker.reject()  # Cancel, Esc or the close button
    assert not picker.reading and not picker.isVisible()
    qtbot.waitUntil(lambda: handle.done, timeout=5000)  # the job ended between two graphs
    assert len(slow_reads) < 3 and chosen == []
    picker.deleteLater()  # a late signal must find nothing to call
    qtbot.wait(50)
    # The worker is free for the next job at once.
    again, chosen_again = _picker(qtbot, runner, three_graphs)
    qtbot.waitUntil(lambda: not again.reading, timeout=10_000)
    again.accept()
    assert chosen_again == [None]  # the folder's default (model.onnx) stays "the default"


def test_a_folder_that_cannot_be_listed_opens_its_default(
    qtbot, runner: JobRunner, three_graphs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(_folder):
        raise PermissionError("no")

    monkeypatch.setattr(variants, "candidate_files", unreadable)
    picker, chosen = _picker(qtbot, runner, three_graphs)
    qtbot.waitUntil(lambda: chosen == [None], timeout=5000)  # the load says what is wrong
    assert not picker.isVisible()


def test_opening_a_folder_with_variants_asks_which(
    qtbot, make_window, tiny_model_dir: Path, three_graphs: Path
) -> None:
    window = make_window(["--model", str(tiny_model_dir)])
    assert models_feature(window).open_model_folder(three_graphs)  # the picker opened
    picker = window.findChild(VariantPicker, "variantPicker")
    assert picker is not None and picker.isVisible()
    qtbot.waitUntil(lambda: not picker.reading, timeout=10_000)
    picker.reject()  # closed: nothing opens
    qtbot.wait(50)
    assert window.chat.controller.backend_session.model.folder == tiny_model_dir
    assert models_feature(window).open_model_folder(three_graphs)
    qtbot.waitUntil(
        lambda: (
            (p := window.findChild(VariantPicker, "variantPicker")) is not None
            and p.isVisible()
            and not p.reading
        ),
        timeout=10_000,
    )
    picker = window.findChild(VariantPicker, "variantPicker")
    picker.list.setCurrentRow(picker.list.count() - 1)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=ANSWER_TIMEOUT_MS
    ):
        picker.open_button.click()
    assert window.chat.controller.backend_session.model.folder == three_graphs
    assert window.chat.controller.backend_session.model.onnx_file == "onnx/model_q4.onnx"
    assert models_feature(window).open_model_folder(
        tiny_model_dir
    )  # one graph: no picker, it loads
    assert window.chat.controller.backend_session.state is State.LOADING


def models_feature(window: MainWindow) -> ModelsFeature:
    feature = window.feature(ModelsFeature)
    assert feature is not None
    return feature


@pytest.fixture(scope="module")
def both_graphs(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Like the default model's folder: the stock model.onnx and the native model_gguf.onnx."""
    out = tmp_path_factory.mktemp("both-graphs") / "both"
    return convert_gguf(tiny_gguf, out, ConvertOptions(graph="both"))


def test_the_kernels_the_folder_opens_with_stay_selected(
    qtbot, runner: JobRunner, both_graphs: Path
) -> None:
    # On a CPU where chatapp's GGUF kernels run, the folder opens its native graph, though the
    # stock one is listed first: accepting keeps the GGUF kernels, it never switches them.
    expected = "model_gguf.onnx" if native_preferred(True) else "model.onnx"
    assert default_graph_name(both_graphs) == expected
    picker, chosen = _picker(qtbot, runner, both_graphs)
    qtbot.waitUntil(lambda: not picker.reading, timeout=10_000)
    assert picker.chosen() == expected
    row = picker.list.currentItem().text()
    assert "opens by default here" in row
    assert ("GGUF kernels" in row) == (expected == "model_gguf.onnx")
    assert "what it opens with here" in picker.status_label.text()
    # Two layouts of the same weights: neither is "more precise".
    assert "most precise" not in picker.status_label.text()
    assert "the same weights laid out for other kernels" in picker.status_label.text()
    picker.open_button.click()
    assert chosen == [None]  # the folder's default: it follows the device


def test_the_graph_running_now_is_selected_when_the_folder_is_reopened(
    qtbot, runner: JobRunner, both_graphs: Path
) -> None:
    other = "model.onnx" if native_preferred(True) else "model_gguf.onnx"
    picker = VariantPicker(runner, both_graphs, running=other)
    qtbot.addWidget(picker)
    chosen: list[object] = []
    picker.sig_chosen.connect(chosen.append)
    picker.open()
    qtbot.waitUntil(lambda: not picker.reading, timeout=10_000)
    assert picker.chosen() == other and "running now" in picker.list.currentItem().text()
    assert "the one running now" in picker.status_label.text()
    picker.open_button.click()
    assert chosen == [other]
