"""Before converting: the folder's size and the peak memory, said and checked."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chatapp.convert import needs
from chatapp.convert.converter import convert_gguf
from chatapp.convert.errors import ConversionError
from chatapp.convert.needs import Needs, Preflight, estimate, gb
from chatapp.convert.preflight import read_header
from tests.convert.test_converter import assert_nothing_written
from tests.tiny_model import write_tiny_gguf


def folder_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def test_the_estimate_is_not_below_the_real_folder(tiny_gguf: Path, tiny_model_dir: Path) -> None:
    planned = estimate(read_header(tiny_gguf))
    assert planned.disk >= folder_size(tiny_model_dir)
    assert planned.memory >= needs.FIXED_MEMORY


def test_a_float_output_projection_counts_as_float(tmp_path: Path) -> None:
    """Q6_K output blocks take no int8 levels: the converter writes float32 (4 bytes a weight)."""
    q4 = write_tiny_gguf(tmp_path / "q4.gguf", hidden=256, ffn=512, tied=False)
    q6 = write_tiny_gguf(
        tmp_path / "q6.gguf", hidden=256, ffn=512, tied=False, tensor_types={"output": "Q6_K"}
    )
    a, b = estimate(read_header(q4)), estimate(read_header(q6))
    vocab_by_hidden = next(
        t.shape[0] * t.shape[1] for t in read_header(q6).tensors if t.name == "output.weight"
    )
    assert b.disk - a.disk > 2.5 * vocab_by_hidden  # float32 against Q4_1's ~0.8 bytes
    out = convert_gguf(q6, tmp_path / "q6")
    assert b.disk >= folder_size(out)


def test_refuses_when_the_disk_is_too_small(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(needs, "free_disk", lambda _folder: 3_200_000)
    out = tmp_path / "out"
    with pytest.raises(ConversionError) as info:
        convert_gguf(tiny_gguf, out)
    planned = estimate(read_header(tiny_gguf))
    assert str(info.value) == (
        f"Converting tiny-llama.gguf needs {gb(planned.disk)} of disk, 3 MB are free in "
        f"{tmp_path}; free some space or choose another folder."
    )
    assert_nothing_written(out)


def test_refuses_when_memory_is_too_small(
    tmp_path: Path, tiny_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(needs, "available_memory", lambda: 100_000_000)
    out = tmp_path / "out"
    with pytest.raises(
        ConversionError,
        match=r"^Converting tiny-llama\.gguf needs about 0\.\d GB of memory, 0\.1 GB are "
        r"available; close other programs and try again\.$",
    ):
        convert_gguf(tiny_gguf, out)
    assert_nothing_written(out)


def test_the_preflight_is_said_before_the_work(tmp_path: Path, tiny_gguf: Path) -> None:
    heard: list[tuple[str, Preflight | float]] = []
    convert_gguf(
        tiny_gguf,
        tmp_path / "out",
        progress=lambda f, _m: heard.append(("progress", f)),
        preflight=lambda plan: heard.append(("plan", plan)),
    )
    assert heard[0][0] == "plan"
    plan = heard[0][1]
    assert isinstance(plan, Preflight)
    assert plan.line("x.gguf").startswith("x.gguf: the model folder takes about ")


def test_without_meminfo_only_the_disk_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(needs, "available_memory", lambda: None)
    plan = needs.check(Needs(disk=1, memory=1 << 60), Path("x.gguf"), Path.cwd())
    assert plan.available_memory is None
    assert plan.line("x.gguf").endswith("of memory.")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/meminfo is Linux's")
def test_available_memory_is_read_on_linux() -> None:
    available = needs.available_memory()
    assert available is not None and available > 0


@pytest.mark.parametrize(
    ("n", "text"), [(3_200_000, "3 MB"), (94_000_000, "94 MB"), (6_123_456_789, "6.1 GB")]
)
def test_sizes_are_written_for_people(n: int, text: str) -> None:
    assert gb(n) == text
