"""Sizes said beside a limit are rounded up (issue 48): "is 1 MB; more than 1 MB is refused"
read as a contradiction for a file of 1.5 MB."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine.errors import ModelError
from chatapp.engine.model_folder.read import read_capped
from chatapp.store.errors import ImportTooLargeError
from chatapp.store.export import LIMITS, check_import_size
from chatapp.units import whole_mb_up

MB = 1 << 20


@pytest.mark.parametrize(
    "size,said", [(0, 0), (1, 1), (MB, 1), (MB + 1, 2), (3 * MB // 2, 2), (2 * MB, 2)]
)
def test_whole_mb_up(size: int, said: int) -> None:
    assert whole_mb_up(size) == said


@pytest.mark.parametrize("over", [1, MB // 2, MB - 1])
def test_a_file_just_over_a_limit_never_reads_as_the_limit(tmp_path: Path, over: int) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_bytes(b" " * (MB + over))
    with pytest.raises(ModelError) as refused:
        read_capped(path, MB, path.name)
    assert str(refused.value) == "tokenizer.json is 2 MB; more than 1 MB is refused."


def test_an_import_just_over_the_limit_says_a_larger_size() -> None:
    with pytest.raises(ImportTooLargeError) as refused:
        check_import_size(LIMITS.file_bytes + 1)
    said = int(str(refused.value).split(" is ")[1].split(" MB")[0])
    assert said > LIMITS.file_bytes >> 20
