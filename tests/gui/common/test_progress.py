"""Time left from the fraction done, and a bar that never goes backwards."""

from __future__ import annotations

from PySide6.QtWidgets import QProgressDialog, QPushButton, QWidget

from chatapp.gui.common.progress import (
    LABEL_WIDTH,
    ConversionProgressDialog,
    ProgressWithTimeLeft,
    TimeLeft,
    time_left_text,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_time_left_words() -> None:
    assert time_left_text(3) == "a few seconds left"
    assert time_left_text(42) == "about 40 s left"
    assert time_left_text(170) == "about 3 min left"
    assert time_left_text(80 * 60) == "about 1 h 20 min left"


def test_estimate_from_the_time_so_far() -> None:
    clock = Clock()
    left = TimeLeft(clock)
    clock.now += 0.5
    assert left.seconds(0.5) is None  # too early to say
    clock.now += 29.5
    assert left.seconds(0.01) is None  # too little done to say
    assert left.seconds(0.25) == 90.0  # 30 s for a quarter: 90 s for the rest
    assert left.text(0.25) == "about 2 min left"
    assert left.seconds(1.0) is None


def test_widget_shows_the_bar_and_time_left(qtbot) -> None:
    clock = Clock()
    widget = ProgressWithTimeLeft(clock=clock)
    qtbot.addWidget(widget)
    widget.start()
    assert widget.isVisibleTo(None) or not widget.isHidden()
    clock.now += 20
    widget.set_fraction(0.5)
    assert widget.bar.value() == 500 and widget.left_label.text() == "about 20 s left"
    widget.set_fraction(0.3)  # an estimate that moves back does not move the bar
    assert widget.bar.value() == 500
    widget.finish()
    assert widget.isHidden()


def test_conversion_dialog_opens_on_the_first_report_and_cancel_reaches_the_job(qtbot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    cancelled: list[bool] = []
    progress = ConversionProgressDialog(
        parent, "testDialog", "Title", "Step {message}…\n{left}", lambda: cancelled.append(True)
    )
    clock = Clock()
    progress.time_left = TimeLeft(clock)
    assert parent.findChild(QProgressDialog, "testDialog") is None  # nothing before a report
    progress.report(0.0, "tokenizer")
    dialog = parent.findChild(QProgressDialog, "testDialog")
    assert dialog is progress.dialog and dialog.isVisible() and dialog.windowTitle() == "Title"
    assert dialog.labelText() == "Step tokenizer…"  # no estimate yet: no empty second line
    clock.now += 30
    progress.report(0.25, "layer 3/12")
    assert dialog.labelText() == "Step layer 3/12…\nabout 2 min left" and dialog.value() == 25
    button = dialog.findChild(QPushButton)
    assert button is not None and button.text() == "Cancel"
    button.click()
    assert cancelled == [True]
    progress.close()
    assert progress.dialog is None and not dialog.isVisible()
    assert cancelled == [True]  # closing is not cancelling


def test_conversion_dialog_keeps_the_plan_above_the_steps(qtbot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    progress = ConversionProgressDialog(
        parent, "planDialog", "Title", "Step {message}…\n{left}", lambda: None
    )
    progress.open("Converting x.gguf…")
    plan = "x.gguf: the model folder takes about 1.4 GB of disk (80 GB free); ..."
    progress.set_note(plan)
    dialog = progress.dialog
    assert dialog is not None and progress.text() == f"{plan}\nConverting x.gguf…"
    assert dialog.labelText().split() == progress.text().split()  # wrapped, nothing lost
    progress.report(0.1, "layer 1/22")
    assert progress.text() == f"{plan}\nStep layer 1/22…"
    progress.close()
    progress.report(0.0, "tokenizer")  # a later conversion starts without the old plan
    assert progress.dialog is not None and progress.dialog.labelText() == "Step tokenizer…"
    progress.close()


def test_a_long_plan_and_path_wrap_instead_of_stretching_the_dialog(qtbot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    progress = ConversionProgressDialog(
        parent, "longDialog", "Title", "Converting for ONNX Runtime: {message}…\n{left}", print
    )
    path = "/home/someone/Downloads/" + "very-long-model-name-" * 8 + "Q4_K_M.gguf"
    progress.open(f"Converting {path} for ONNX Runtime…")
    progress.set_note(
        f"{path}: the model folder takes about 1.4 GB of disk (80 GB free); the "
        "native graph keeps the Q4_K and Q6_K blocks as they are, the tokenizer comes from the "
        "GGUF's own vocabulary, and no chat template was found in the file"
    )
    progress.report(0.5, "layer 11/22")
    dialog = progress.dialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    metrics = dialog.fontMetrics()
    lines = dialog.labelText().split("\n")
    assert len(lines) > 3 and all(metrics.horizontalAdvance(x) <= LABEL_WIDTH for x in lines)
    assert dialog.width() <= LABEL_WIDTH + 80  # it was about 945 px
    assert "…" in dialog.labelText() and dialog.toolTip() == progress.text()  # the path, whole
    assert path in progress.text()
    progress.close()
