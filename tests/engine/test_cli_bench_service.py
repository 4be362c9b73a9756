"""`chatapp bench` is a client of an engine service, as `chatapp generate` is: each of its
measurements runs as a job on the service's thread, never on the calling one
(docs/architecture.md, "Threads"), and its progress lines reach stderr as they come."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from chatapp.cli.main import main
from chatapp.engine.bench import parallel, run, speculative
from chatapp.session import fidelity


class Result:
    """Stands for a measurement's result: what the command prints of it."""

    def to_dict(self) -> dict[str, Any]:
        return {"measured": True}


def recording(threads: list[str], returned: object) -> Any:
    def measure(*_args: object, progress: Any = None, **_kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        if progress is not None:
            progress("halfway")
        return returned

    return measure


@pytest.mark.parametrize(
    ("owner", "name", "flags", "returned"),
    [
        (run, "run_bench_suite", (), {"measured": True}),
        (parallel, "measure_parallel", ("--parallel", "2"), Result()),
        (speculative, "measure_speculative", ("--speculative",), Result()),
        (fidelity, "measure_fidelity", ("--fidelity",), Result()),
    ],
)
def test_each_bench_measurement_runs_on_an_engine_service(
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    owner: object,
    name: str,
    flags: tuple[str, ...],
    returned: object,
) -> None:
    threads: list[str] = []
    monkeypatch.setattr(owner, name, recording(threads, returned))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")  # --fidelity's reference: the measurement is replaced
    args = ["bench", "--model", str(tiny_model_dir), "--threads", "1", "--json", *flags]
    if name == "measure_fidelity":
        args += ["--peer-gguf", str(gguf)]
    assert main(args) == 0
    assert len(threads) == 1 and threads[0] != threading.current_thread().name
    assert threads[0].startswith("chatapp-")  # the service's job thread
    out = capsys.readouterr()
    assert '"measured": true' in out.out
    if name in ("run_bench_suite", "measure_fidelity", "measure_speculative"):
        assert "halfway" in out.err  # the progress line, printed on the caller's thread


def test_a_measurements_error_is_said_as_before(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from chatapp.engine.errors import EngineError

    def refused(*_args: object, **_kwargs: object) -> object:
        raise EngineError("This model cannot decode several sequences at once.")

    monkeypatch.setattr(parallel, "measure_parallel", refused)
    args = ["bench", "--model", str(tiny_model_dir), "--threads", "1", "--parallel", "2"]
    assert main(args) != 0
    assert "cannot decode several sequences at once" in capsys.readouterr().err
