"""The loops' device-memory code paths, run on every machine.

A device with its own memory is emulated with the CPU provider and `own_memory=True`: the loops
then re-bind per-step inputs, keep the KV in device values, count the bytes that would cross,
and turn run failures into DeviceFailure, exactly as on a GPU. test_webgpu.py repeats the
token checks on a real device where one can be set up.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from chatapp.engine import loaded_model as engine_module
from chatapp.engine.devices import CPU, Device, StartedSession, create_session, session_options
from chatapp.engine.engine import Engine
from chatapp.engine.errors import DeviceFailure
from chatapp.engine.loop_factory import make_loop
from chatapp.engine.loops import KVLoop
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.model_folder.model import KVLayout
from chatapp.engine.sampling import SamplingSettings
from tests.engine.device_checks import (
    FOLLOW_UP,
    PROMPT,
    convert_layouts,
    greedy_trace,
    iobinding_step_bytes,
    naive_kv_bytes,
)

EMULATED = dataclasses.replace(CPU, name="emulated", label="Emulated device", own_memory=True)
CONTEXT = 96


@pytest.fixture(scope="module")
def layouts(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return convert_layouts(varied_gguf, tmp_path_factory.mktemp("layouts"))


def loop_on(folder: Path, device: Device, mode: str) -> KVLoop:
    info = open_model_folder(folder)
    session = create_session(info.onnx_path, CPU, session_options(threads=1))
    return make_loop(mode, session, info, device, CONTEXT)


LAYOUT_NAMES = ["shared-buffer", "concat", "static-w1", "static-w3"]


@pytest.mark.parametrize("layout", LAYOUT_NAMES)
@pytest.mark.parametrize("mode", ["naive", "iobinding"])
def test_device_paths_give_the_cpu_tokens(layouts: dict[str, Path], layout: str, mode: str) -> None:
    reference = greedy_trace(loop_on(layouts[layout], CPU, "naive"), PROMPT, 16)
    assert len(set(reference.tokens)) > 4  # a model whose answer varies: stale inputs would show
    loop = loop_on(layouts[layout], EMULATED, mode)
    trace = greedy_trace(loop, PROMPT, 16)
    assert trace.tokens == reference.tokens
    np.testing.assert_allclose(trace.logits, reference.logits, atol=1e-4)
    # A follow-up turn that diverges from the cache: cut (or restart) and continue.
    follow_ref = greedy_trace(loop_on(layouts[layout], CPU, "naive"), FOLLOW_UP, 8)
    assert greedy_trace(loop, FOLLOW_UP, 8).tokens == follow_ref.tokens


@pytest.mark.parametrize("layout", ["shared-buffer", "concat"])
def test_bytes_per_step_on_a_device(layouts: dict[str, Path], layout: str) -> None:
    info = open_model_folder(layouts[layout])
    iob = greedy_trace(loop_on(layouts[layout], EMULATED, "iobinding"), PROMPT, 6)
    for i, step in enumerate(iob.steps):
        total = len(PROMPT) + i + 1
        assert (step.h2d_bytes, step.d2h_bytes) == iobinding_step_bytes(info, total)
    naive = greedy_trace(loop_on(layouts[layout], EMULATED, "naive"), PROMPT, 6)
    for i, step in enumerate(naive.steps):
        past = len(PROMPT) + i
        # Every layer's KV goes in as past and comes back one token longer as present.
        assert (
            step.h2d_bytes == naive_kv_bytes(info, past) + iobinding_step_bytes(info, past + 1)[0]
        )
        assert step.d2h_bytes == naive_kv_bytes(info, past + 1) + 4 * info.vocab_size
    cpu = greedy_trace(loop_on(layouts[layout], CPU, "naive"), PROMPT, 3)
    assert all(s.h2d_bytes == s.d2h_bytes == 0 for s in cpu.steps)  # nothing crosses a bus


def test_static_iobinding_moves_only_inputs_and_logits(layouts: dict[str, Path]) -> None:
    info = open_model_folder(layouts["static-w3"])
    trace = greedy_trace(loop_on(layouts["static-w3"], EMULATED, "iobinding"), PROMPT, 4)
    window, slots = 3, info.context_length
    for step in trace.steps:
        assert step.h2d_bytes == 8 * window + 8 * slots
        assert step.d2h_bytes == 4 * window * info.vocab_size


def test_shared_buffer_kv_stays_in_device_values(layouts: dict[str, Path]) -> None:
    loop = loop_on(layouts["shared-buffer"], EMULATED, "iobinding")
    values = loop.kv.bound_values()
    greedy_trace(loop, PROMPT, 4)
    assert loop.info.layout is KVLayout.SHARED_BUFFER
    assert all(loop.kv.bound_values()[name] is value for name, value in values.items())


def test_a_failed_run_on_a_device_is_a_device_failure(
    layouts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = loop_on(layouts["shared-buffer"], EMULATED, "iobinding")
    greedy_trace(loop, PROMPT, 2)

    def lost(*_args: object) -> None:
        raise RuntimeError("VK_ERROR_DEVICE_LOST: the adapter went away")

    monkeypatch.setattr(loop.session, "run_with_iobinding", lost)
    with pytest.raises(DeviceFailure, match="Emulated device failed during the answer"):
        loop.forward([5])


def test_engine_falls_back_to_the_cpu_after_a_device_failure(
    layouts: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = layouts["shared-buffer"]

    def start_emulated(
        path: Path,
        _device: Device,
        threads: int | None = None,
        precision: str = "fast",
        _graph: bytes | None = None,  # the CPU underneath runs the file's graph
    ) -> StartedSession:
        opts = session_options(threads, precision)
        return StartedSession(create_session(path, CPU, opts), EMULATED)

    monkeypatch.setattr(engine_module, "find_device", lambda _name: EMULATED)
    monkeypatch.setattr(engine_module, "start_session", start_emulated)
    engine = Engine(folder, "emulated", "iobinding", threads=1, max_context=CONTEXT)
    greedy = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=12)
    expected = engine.generate_ids(PROMPT, greedy, ignore_eos=True).run().token_ids
    calls = {"n": 0}
    real_run = ort.InferenceSession.run_with_iobinding

    def failing(session: ort.InferenceSession, binding: ort.IOBinding, *rest: object) -> None:
        if session is engine.session:  # the model's runs, not the log-probabilities' session
            calls["n"] += 1
            if calls["n"] > 3:
                raise RuntimeError("out of device memory")
        real_run(session, binding, *rest)

    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", failing)
    engine.loop().reset()
    gen = engine.generate_ids(PROMPT, greedy, ignore_eos=True)
    with pytest.raises(DeviceFailure) as failure:
        gen.run()
    assert len(gen.stats.token_ids) == 3  # what streamed before the failure is kept
    monkeypatch.setattr(ort.InferenceSession, "run_with_iobinding", real_run)
    engine.fall_back_to_cpu(f"{failure.value} The next answer runs on the CPU.")
    assert engine.device is CPU and "out of device memory" in str(engine.fallback_reason)
    assert engine.generate_ids(PROMPT, greedy, ignore_eos=True).run().token_ids == expected
