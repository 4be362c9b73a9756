"""A benchmark report on disk: chart PNGs (QtCharts, offscreen if there is no display), JSON and
CSV of every number, and a Markdown page that embeds the pictures.

Used by the comparison view's Export and by `chatapp bench --report DIR`.
"""

from __future__ import annotations

import csv
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chatapp.engine.bench.report import markdown_report
from chatapp.engine.bench.sentences import caching_title as summary_caching_title
from chatapp.engine.bench.summary import summarize_comparison
from chatapp.engine.modes import MODES, Mode
from chatapp.safe_delete import replacing, replacing_path

CHART_SIZE = (900, 420)
PER_TOKEN_TITLE = "Time per token (median)"


@dataclass(frozen=True)
class ReportFiles:
    folder: Path
    markdown: Path
    json: Path
    csv: list[Path]
    images: list[Path]


def ensure_app() -> Any:
    """A QApplication for drawing; offscreen when the machine has no display."""
    headless = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    if headless and sys.platform.startswith("linux"):
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtWidgets import QApplication

    return QApplication.instance() or QApplication(["chatapp-report"])


def build_charts(result: dict[str, Any]) -> dict[str, Any]:
    """The report's charts (name -> QChart) filled from a bench-format result."""
    from chatapp.gui.common.theme import colors, light_palette
    from chatapp.gui.compare.charts import (
        LOOPS,
        LatencyLinesChart,
        PairBarChart,
        StepSplitChart,
        SweepChart,
        TransferChart,
        add_sweep_point,
        show_loop_bars,
    )

    charts: dict[str, Any] = {}
    loops = [loop for loop in LOOPS if loop in result]
    latency = LatencyLinesChart()
    splits = {loop: StepSplitChart(loop) for loop in loops}
    speed = PairBarChart(PER_TOKEN_TITLE, "ms")
    ttft = PairBarChart("Time to first token (median)", "ms")
    answer = PairBarChart(caching_title(result), "s")
    tallest = 0.0
    for loop in loops:
        summary = result[loop]
        run = summary["first_run"]
        latency.set_series(loop, [x * 1000 for x in run["latencies_s"]])
        for step in run["steps"]:
            parts = (step["run_s"] * 1000, step["host_s"] * 1000, step["sample_s"] * 1000)
            splits[loop].append(*parts)
            if Mode(loop).caches:  # the cached loops on one scale; no cache on its own
                tallest = max(tallest, sum(parts))
        show_loop_bars(loop, summary, speed, ttft, answer)
    for loop, chart in splits.items():
        if Mode(loop).caches:
            chart.set_y_max(tallest)
    light = colors(light_palette())  # a report reads the same whatever the window's theme
    themed: tuple[Any, ...] = (latency, *splits.values(), speed, ttft, answer)
    for each in themed:
        each.apply_colors(light)
    charts["latency"] = latency
    for loop, chart in splits.items():
        charts[f"split_{loop}"] = chart
    charts["time_per_token"], charts["ttft"] = speed, ttft
    if Mode.NOCACHE in result:
        charts["answer"] = answer
    if result.get("sweep"):
        sweep, transfer = SweepChart(), TransferChart()
        transfer.set_shared_memory(not result.get("device_own_memory"))
        for point in result["sweep"]:
            add_sweep_point(sweep, transfer, point)
        sweep.apply_colors(light)
        transfer.apply_colors(light)
        charts["sweep"], charts["transfer"] = sweep, transfer
    return charts


def caching_title(result: dict[str, Any]) -> str:
    """The whole-answer chart's title: each cached loop's own speed-up (the sentences')."""
    return summary_caching_title(summarize_comparison(result))


def render_chart(chart: Any, path: Path, size: tuple[int, int] = CHART_SIZE) -> Path:
    from PySide6.QtCharts import QChartView
    from PySide6.QtGui import QPainter

    view = QChartView(chart)
    view.setRenderHint(QPainter.RenderHint.Antialiasing)
    view.resize(*size)
    with replacing_path(path) as temporary:
        if not view.grab().save(str(temporary), "PNG"):
            raise OSError(f"could not write {path}")
    return path


def write_csv(result: dict[str, Any], folder: Path) -> list[Path]:
    tokens = folder / "tokens.csv"
    with replacing(tokens, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "loop",
                "token",
                "latency_ms",
                "run_ms",
                "host_ms",
                "sample_ms",
                "h2d_bytes",
                "d2h_bytes",
            ]
        )
        for loop in (m for m in MODES if m in result):
            run = result[loop]["first_run"]
            for i, (lat, step) in enumerate(zip(run["latencies_s"], run["steps"], strict=True), 1):
                writer.writerow(
                    [
                        loop,
                        i,
                        f"{lat * 1000:.3f}",
                        f"{step['run_s'] * 1000:.3f}",
                        f"{step['host_s'] * 1000:.3f}",
                        f"{step['sample_s'] * 1000:.3f}",
                        step.get("h2d_bytes", 0),
                        step.get("d2h_bytes", 0),
                    ]
                )
    summary = folder / "summary.csv"
    with replacing(summary, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(
            [
                "context_tokens",
                "loop",
                "tokens_per_s",
                "ttft_ms",
                "latency_p50_ms",
                "latency_p95_ms",
                "host_prep_share",
                "tokens_per_s_min",
                "tokens_per_s_max",
                "h2d_bytes_per_token",
                "d2h_bytes_per_token",
                "repeats",
            ]
        )
        points = [result, *result.get("sweep", [])]
        for point in points:
            for loop in (m for m in MODES if m in point):
                r = point[loop]
                writer.writerow(
                    [
                        point["prompt_tokens"],
                        loop,
                        f"{r['tokens_per_s']:.2f}",
                        f"{r['ttft_s'] * 1000:.1f}",
                        f"{r['latency_p50_s'] * 1000:.2f}",
                        f"{r['latency_p95_s'] * 1000:.2f}",
                        f"{r['host_prep_share']:.4f}",
                        f"{r['spread']['tokens_per_s'][0]:.2f}",
                        f"{r['spread']['tokens_per_s'][1]:.2f}",
                        f"{r['transfer']['h2d_bytes_per_token']:.0f}",
                        f"{r['transfer']['d2h_bytes_per_token']:.0f}",
                        r["repeats"],
                    ]
                )
    return [tokens, summary]


IMAGE_CAPTIONS = {
    "latency": "Time per token along the answer, one line per loop",
    **{f"split_{m}": f"{m.label} loop: run / host preparation / sampling per token" for m in MODES},
    "answer": "The whole answer's time per loop: caching's speed-up",
    "time_per_token": "Time per token: the median of each run's median, the runs' range",
    "ttft": "Time to first token",
    "sweep": "Time per token (median) against the context length",
    "transfer": "Bytes crossing host↔device per token against the context length",
}


def write_report(result: dict[str, Any], folder: Path | str) -> ReportFiles:
    """Write report.md, result.json, tokens.csv, summary.csv and the chart PNGs into `folder`."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    ensure_app()
    images = [
        render_chart(chart, out / f"{name}.png") for name, chart in build_charts(result).items()
    ]
    data = out / "result.json"
    with replacing(data) as fh:  # a name in the chosen folder that links elsewhere: replaced
        fh.write(json.dumps(result, indent=2) + "\n")
    tables = write_csv(result, out)
    lines = ["# chatapp benchmark report", "", markdown_report(result), ""]
    env = result.get("environment", {})
    if env:
        lines += [
            f"onnxruntime {env.get('onnxruntime')}, Python {env.get('python')}, "
            f"{env.get('processor')}, {env.get('time')}",
            "",
        ]
    for image in images:
        caption = IMAGE_CAPTIONS.get(image.stem, image.stem)
        lines += [f"## {caption}", "", f"![{caption}]({image.name})", ""]
    lines += [
        "Numbers: [result.json](result.json), [tokens.csv](tokens.csv), [summary.csv](summary.csv)."
    ]
    markdown = out / "report.md"
    with replacing(markdown) as fh:
        fh.write("\n".join(lines) + "\n")
    return ReportFiles(out, markdown, data, tables, images)
