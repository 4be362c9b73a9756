"""The benchmark report: charts drawn offscreen, numbers as JSON/CSV, a Markdown page."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from chatapp.engine.bench.run import BenchConfig, run_bench_suite
from chatapp.gui.compare.report import CHART_SIZE, write_report


@pytest.fixture(scope="module")
def result(tiny_model_dir: Path) -> dict:
    config = BenchConfig(
        model_dir=tiny_model_dir,
        max_new_tokens=12,
        repeats=1,
        threads=1,
        sweep=[32, 96],
        floor=False,
    )
    return run_bench_suite(config)


def test_report_files_exist_and_parse(result: dict, tmp_path: Path, qapp: object) -> None:
    files = write_report(result, tmp_path / "report")
    names = sorted(p.name for p in files.images)
    assert names == [
        "latency.png",
        "split_iobinding.png",
        "split_naive.png",
        "sweep.png",
        "time_per_token.png",
        "transfer.png",
        "ttft.png",
    ]
    for image in files.images:
        loaded = QImage(str(image))
        assert not loaded.isNull(), image
        assert (loaded.width(), loaded.height()) == CHART_SIZE
        # A drawn chart has many colors; a blank grab has one or two.
        colors = {
            loaded.pixel(x, y)
            for x in range(0, loaded.width(), 7)
            for y in range(0, loaded.height(), 7)
        }
        assert len(colors) > 8, image
    data = json.loads(files.json.read_text())
    assert data["same_tokens"] is True
    assert len(data["sweep"]) == 2
    with (files.folder / "tokens.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * 11  # 12 tokens per loop, the first is TTFT, not a latency
    assert {r["loop"] for r in rows} == {"naive", "iobinding"}
    assert all(float(r["latency_ms"]) > 0 for r in rows)
    with (files.folder / "summary.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 2 * 3  # main point + two sweep points
    markdown = files.markdown.read_text()
    for image in files.images:
        assert f"]({image.name})" in markdown
    assert "| IO-Binding |" in markdown
    # The report's sentences are the view's, from the same numbers.
    from chatapp.engine.bench.sentences import explanation

    sentences = explanation(result, result["sweep"]).splitlines()
    for sentence in (s for s in sentences if not s.startswith("On ")):  # the device's: below
        assert sentence in markdown, sentence


def test_headless_cli_report(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "chatapp",
            "bench",
            "--model",
            str(tiny_model_dir),
            "--max-new-tokens",
            "6",
            "--repeats",
            "1",
            "--sweep",
            "24,48",
            "--report",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"},
    )
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "r" / "report.md").is_file()
    assert (tmp_path / "r" / "sweep.png").stat().st_size > 5000


def test_a_report_with_no_cache_has_its_charts_and_the_speed_up(
    tiny_model_dir: Path, tmp_path: Path, qapp: object
) -> None:
    from chatapp.engine.modes import MODES

    config = BenchConfig(
        model_dir=tiny_model_dir, max_new_tokens=10, repeats=2, threads=1, modes=MODES, floor=False
    )
    result = run_bench_suite(config)
    files = write_report(result, tmp_path / "report")
    names = {p.name for p in files.images}
    assert {"split_nocache.png", "answer.png", "split_naive.png"} <= names
    markdown = files.markdown.read_text()
    assert "| No cache |" in markdown and "No cache loop: run / host" in markdown
    assert "Caching, the whole 10-token answer (first token included): No cache " in markdown
    with (files.folder / "tokens.csv").open() as fh:
        assert {r["loop"] for r in csv.DictReader(fh)} == {"nocache", "naive", "iobinding"}


@pytest.mark.parametrize("name", ["result.json", "report.md", "tokens.csv", "latency.png"])
def test_a_report_name_that_links_to_a_users_file_is_replaced_not_written_through(
    result: dict, tmp_path: Path, qapp: object, name: str
) -> None:
    """Issue 37: the report writes its own names in the folder chosen; one that is a symbolic
    link to a file of the user's is replaced as a link, and the user's file is untouched."""
    mine = tmp_path / "home" / "thesis.txt"
    mine.parent.mkdir()
    mine.write_text("years of work")
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / name).symlink_to(mine)
    files = write_report(result, folder)
    assert mine.read_text() == "years of work"
    assert not (folder / name).is_symlink() and (folder / name).stat().st_size > 0
    assert files.markdown.is_file()
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".writing")]
