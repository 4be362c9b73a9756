"""`chatapp [--model DIR] [--device NAME] ...`: a bad value or an unknown argument ends with one
line on stderr and exit status 2, before any window exists (the CLI's own checks, reused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp import cli
from chatapp.gui import app as gui_app


def refused(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("chatapp: error: ")
    return err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--device", "tpu"], "unknown device 'tpu'; choose from"),
        (["--device", ""], "unknown device"),
        (["--mode", "fast"], "invalid choice: 'fast'"),
        (["--quit-after-ms", "-5"], "-5 is out of range"),
        (["--quit-after-ms", "soon"], "'soon' is not a time in milliseconds"),
        (["--quit-after-ms", "9" * 400], "is out of range"),
        (["--model", ""], "'' is not a folder name"),
        (["--model", "\udcff"], "not valid UTF-8"),
        (["--onnx-file", "onnx/model.onnx"], "--onnx-file needs --model"),
        (["--temprature", "5"], "unrecognized arguments: --temprature"),
        (["converrt", "x.gguf"], "unexpected argument 'converrt'"),
        (["-style"], "-style needs a value"),
    ],
)
def test_bad_gui_arguments_are_one_line(capsys, argv: list[str], says: str) -> None:
    assert says in refused(capsys, argv)


def test_onnx_file_outside_the_folder_is_refused(capsys, tmp_path: Path) -> None:
    err = refused(capsys, ["--model", str(tmp_path), "--onnx-file", "/etc/passwd"])
    assert "is an absolute path" in err


def test_good_arguments_and_qt_options_pass(tmp_path: Path) -> None:
    args, rest = gui_app.parse_args(
        ["--model", str(tmp_path), "--device", "CPU", "-platform", "offscreen", "-reverse"]
    )
    assert args.model == tmp_path and args.device == "cpu"
    assert rest == ["-platform", "offscreen", "-reverse"]
    _, rest = gui_app.parse_args(["--style=fusion", "--quit-after-ms", "0"])
    assert rest == ["--style=fusion"]
