"""The line under each answer names the variant that wrote it (the graph of the model's folder,
as the variant picker lists it), and the history keeps it with the answer."""

from __future__ import annotations

import shutil
from pathlib import Path

from chatapp.engine.model_folder.read import candidate_files
from chatapp.session.formatting import figures_line
from chatapp.store import HistoryStore
from tests.gui.conftest import greedy, send_and_wait, set_sampling


def test_each_answer_names_its_own_variant_in_its_line_and_in_the_history(
    qtbot, make_window, tiny_model_dir: Path, history_file: Path, tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "two-variants"))
    shutil.copy(folder / "model.onnx", folder / "model_fp32.onnx")  # a second graph
    graphs = [p.relative_to(folder).as_posix() for p in candidate_files(folder)]
    assert len(graphs) == 2, graphs
    window = make_window(["--model", str(folder)])
    set_sampling(window, greedy(3))
    send_and_wait(qtbot, window, "first")
    first = window.host.engine.info.onnx_file
    other = next(g for g in graphs if g != first)
    with qtbot.waitSignal(
        window.chat.controller.backend_session.events.model_loaded, timeout=30_000
    ):
        window.open_model(folder, onnx_file=other)
    assert window.host.engine.info.onnx_file == other
    send_and_wait(qtbot, window, "second")

    answers = [m for m in window.chat.conversation.messages if m.role == "assistant"]
    assert [m.figures.variant for m in answers] == [first, other]
    name = window.chat.controller.backend_session.model.name
    for answer, graph in zip(answers, (first, other), strict=True):
        assert figures_line(answer.figures).startswith(f"{name} ({graph}) · ")
    # What the window shows under each answer.
    shown = window.chat.chat_view.transcript.toPlainText()
    assert f"{name} ({first}) · " in shown and f"{name} ({other}) · " in shown

    chat_id = window.chat.conversation.id
    with HistoryStore(history_file) as store:
        stored = store.load_conversation(chat_id).messages
    assert [m.figures.variant for m in stored if m.role == "assistant"] == [first, other]
