"""A model folder read once: the description an Engine and a packed copy are built from."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine import loaded_model as engine_module
from chatapp.engine import model_description
from chatapp.engine.engine import Engine, open_model
from chatapp.engine.errors import EngineError
from chatapp.engine.model_description import (
    MemoryRefusal,
    engine_context,
    estimate_memory,
    is_cpu,
    model_sampling,
    read_model,
    read_model_folder,
)


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folders read from now on (model_description's one reading function)."""
    folders: list[Path] = []
    real = model_description.read_model_folder

    def counted(folder: Path, *args: object, **kwargs: object) -> object:
        folders.append(Path(folder))
        return real(folder, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(model_description, "read_model_folder", counted)
    return folders


def test_the_description_holds_what_the_folder_says(tiny_model_dir: Path) -> None:
    model = read_model(tiny_model_dir, max_context=64)
    read = read_model_folder(tiny_model_dir)
    info = read.info
    assert model.info == info and model.folder == tiny_model_dir
    assert model.context == 64 == model.memory.context
    assert model.memory == estimate_memory(read, 64)  # the same figures, one graph read fewer
    assert model.on_cpu and model.onnx_file is None
    assert model.sampling == model_sampling(tiny_model_dir, info.onnx_path.stat().st_size)
    assert read_model(tiny_model_dir).context == engine_context(info)  # the default cap
    assert not read_model(tiny_model_dir, device="cuda").on_cpu and is_cpu(" CPU ")


def test_an_engine_from_a_folder_reads_it_once_and_checks_memory_once(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = count_reads(monkeypatch)
    checks: list[int] = []
    real_check = engine_module.check_memory

    def counted_check(
        estimate: model_description.MemoryEstimate, name: str, freed: int = 0
    ) -> None:
        checks.append(estimate.total)
        real_check(estimate, name, freed)

    monkeypatch.setattr(engine_module, "check_memory", counted_check)
    engine = Engine(tiny_model_dir, threads=1, max_context=64)
    assert reads == [tiny_model_dir] and checks == [engine.memory.total]
    # Built from a description read before: nothing is read or checked again.
    model = read_model(tiny_model_dir, max_context=32)
    reads.clear()
    checks.clear()
    again = Engine(model, threads=1)
    assert reads == [] and checks == []
    assert again.model is model and again.max_context == 32 and again.info == model.info


def test_a_description_has_its_graph_and_context_already(tiny_model_dir: Path) -> None:
    model = read_model(tiny_model_dir, max_context=32)
    with pytest.raises(ValueError, match="already"):
        Engine(model, threads=1, max_context=64)
    with pytest.raises(EngineError, match="at least 1 token"):
        read_model(tiny_model_dir, max_context=0)


def test_open_model_refuses_what_does_not_fit_counting_what_closing_frees(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    need = read_model(tiny_model_dir, max_context=64).memory.total
    monkeypatch.setattr(model_description, "available_memory", lambda: need - 1000)
    with pytest.raises(MemoryRefusal, match="needs about"):
        open_model(tiny_model_dir, max_context=64)
    assert open_model(tiny_model_dir, max_context=64, freed=1000).memory.total == need


def test_a_device_read_holds_the_graph_its_session_runs(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    import onnx

    from chatapp.engine.devices import CPU, StartedSession
    from chatapp.engine.loaded_model import DevicePlan, start_model
    from chatapp.folder_format.graph import STEP_OR_PROMPT_NODE, all_nodes, float_kernel_graph

    on_cpu = read_model(tiny_model_dir)
    on_device = read_model(tiny_model_dir, device="a-device")
    assert on_cpu.device_graph is None
    graph = onnx.load(on_device.info.onnx_path, load_external_data=False)
    assert on_device.device_graph == float_kernel_graph(graph) is not None
    copy = onnx.load_from_string(on_device.device_graph)
    assert not any(n.name == STEP_OR_PROMPT_NODE for n in all_nodes(copy.graph))
    # The session's start is handed that graph: it does not read the file for it again.
    device = dataclasses.replace(CPU, name="a-device", label="A device")  # the CPU underneath
    handed: list[bytes | None] = []
    real_start = engine_module.start_session

    def start(
        path: Path,
        asked: object,
        threads: int | None = None,
        precision: str | None = None,
        graph: bytes | None = None,
    ) -> StartedSession:
        handed.append(graph)
        return StartedSession(real_start(path, CPU, threads, precision).session, device)

    monkeypatch.setattr(engine_module, "find_device", lambda _name: device)
    monkeypatch.setattr(engine_module, "start_session", start)
    monkeypatch.setattr(engine_module, "attention_refusal", lambda *_args: None)
    model = start_model(on_device, DevicePlan("a-device", threads=1))
    assert handed == [on_device.device_graph] and model.device is device
