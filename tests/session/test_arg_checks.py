"""The argument types shared by the command line and the window."""

from __future__ import annotations

import argparse

import pytest

from chatapp.session import arg_checks


@pytest.mark.parametrize(
    ("parse", "text", "says"),
    [
        (arg_checks.whole(1, 10), "0", "0 is out of range: from 1 to 10"),
        (arg_checks.whole(1, 10), "x", "'x' is not a whole number"),
        (arg_checks.number(0, 2), "nan", "nan is not a finite number"),
        (arg_checks.number(0, 2, low_open=True), "0", "out of range: above 0"),
        (arg_checks.sweep, "1,x", "'x' is not a context length"),
        (arg_checks.onnx_file, "/abs.onnx", "is an absolute path"),
        (arg_checks.text, "a\udcffb", "is not valid UTF-8"),
    ],
)
def test_bad_values_say_why(parse, text: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=None) as refused:
        parse(text)
    assert says in str(refused.value)


def test_good_values_pass() -> None:
    assert arg_checks.whole(1, 10)(" 7 ") == 7
    assert arg_checks.sweep("128, 512") == [128, 512]
    assert arg_checks.onnx_file("onnx/model_q4.onnx") == "onnx/model_q4.onnx"
    assert arg_checks.printable("two\nlines") == "two lines"
