"""Both loops on a real device with its own memory: ONNX Runtime's WebGPU plugin.

On machines without a GPU this uses Mesa's software Vulkan driver (lavapipe >= 25; `.ci/run`
installs it from bookworm-backports). Where WebGPU cannot be set up, every test here skips with
the reason (`pytest -rs` prints it); none passes without having run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.devices import CPU, Device, DeviceError, find_device
from chatapp.engine.engine import Engine
from chatapp.engine.model_folder.model import KVLayout
from chatapp.engine.modes import CACHED_MODES
from chatapp.engine.sampling import SamplingSettings
from tests.engine.device_checks import (
    FOLLOW_UP,
    PROMPT,
    convert_layouts,
    greedy_trace,
    iobinding_step_bytes,
)

CONTEXT = 96
# WebGPU's GroupQueryAttention computes runs of 32 tokens and more on another kernel whose rows
# past the eighth disagree with the CPU's (up to 0.8 in the logits on lavapipe); the loops run
# such sequences in pieces of at most 31 there (devices.WEBGPU_MAX_RUN_ROWS): a 45-token
# prompt checks that, and the no-cache loop's whole sequence every step.
LONG_PROMPT = [*PROMPT, *PROMPT[:22]]


@pytest.fixture(scope="module")
def webgpu() -> Device:
    """A hardware adapter where there is one, else the software one (which tests may enable)."""
    try:
        return find_device("webgpu")
    except DeviceError:
        pass
    try:
        return find_device("webgpu-software")
    except DeviceError as exc:
        pytest.skip(f"WebGPU cannot be set up here: {exc}")


@pytest.fixture(scope="module")
def layouts(varied_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return convert_layouts(varied_gguf, tmp_path_factory.mktemp("webgpu-layouts"))


def engines(folder: Path, device: Device) -> tuple[Engine, Engine]:
    cpu = Engine(folder, "cpu", threads=1, max_context=CONTEXT)
    gpu = Engine(folder, device.name, threads=1, max_context=CONTEXT)
    assert gpu.device.name == device.name, gpu.fallback_reason
    return cpu, gpu


@pytest.mark.parametrize("layout", ["shared-buffer", "concat", "static-w1", "static-w3"])
def test_both_loops_give_the_cpu_tokens_on_webgpu(
    webgpu: Device, layouts: dict[str, Path], layout: str
) -> None:
    cpu, gpu = engines(layouts[layout], webgpu)
    reference = greedy_trace(cpu.loop("naive"), PROMPT, 16)
    follow_ref = greedy_trace(cpu.loop("naive"), FOLLOW_UP, 8)
    long_ref = greedy_trace(cpu.loop("naive"), LONG_PROMPT, 8)
    assert len(set(reference.tokens)) > 4
    for mode in CACHED_MODES:
        loop = gpu.loop(mode)
        trace = greedy_trace(loop, PROMPT, 16)
        assert trace.tokens == reference.tokens, mode
        # Every step's logits, not just the argmax: a stale input changes them.
        np.testing.assert_allclose(trace.logits, reference.logits, atol=2e-3, rtol=1e-3)
        # A second turn that diverges from the cached prefix (cut, or restart when static).
        assert greedy_trace(loop, FOLLOW_UP, 8).tokens == follow_ref.tokens, mode
        # A prompt longer than one WebGPU run (LONG_PROMPT above), in a new chat.
        loop.reset()
        trace = greedy_trace(loop, LONG_PROMPT, 8)
        assert trace.tokens == long_ref.tokens, mode
        # Pieces sum in another order than the CPU's one run (the bug gave differences of 0.3+).
        np.testing.assert_allclose(trace.logits, long_ref.logits, atol=5e-3, rtol=1e-3)


@pytest.mark.parametrize("layout", ["shared-buffer", "concat", "static-w1", "static-w3"])
def test_the_loop_without_a_cache_gives_the_cpu_tokens_on_webgpu(
    webgpu: Device, layouts: dict[str, Path], layout: str
) -> None:
    cpu, gpu = engines(layouts[layout], webgpu)
    reference = greedy_trace(cpu.loop("naive"), LONG_PROMPT, 16)
    trace = greedy_trace(gpu.loop("nocache"), LONG_PROMPT, 16)
    assert trace.tokens == reference.tokens
    # The whole sequence in one run sums in another order than one token at a time.
    np.testing.assert_allclose(trace.logits, reference.logits, atol=5e-3, rtol=1e-3)
    if gpu.info.layout is not KVLayout.STATIC_WINDOW:
        # Only the ids, the mask (and positions) go in, one row of logits comes out: no KV
        # kept (the pieces of one step pass their presents on, less than the sequence's KV).
        # (A static graph's past is a fixed-size input: zeros go in and presents come out.)
        kv = gpu.info.kv_bytes_per_token() * len(LONG_PROMPT)
        assert all(s.h2d_bytes < kv and s.d2h_bytes < kv for s in trace.steps)


def test_iobinding_keeps_the_kv_on_the_device(webgpu: Device, layouts: dict[str, Path]) -> None:
    _cpu, gpu = engines(layouts["shared-buffer"], webgpu)
    loop = gpu.loop("iobinding")
    assert gpu.info.layout is KVLayout.SHARED_BUFFER
    trace = greedy_trace(loop, PROMPT, 6)
    assert {v.device_name() for v in loop.kv.bound_values().values()} == {"webgpu"}
    for i, step in enumerate(trace.steps):
        expected = iobinding_step_bytes(gpu.info, len(PROMPT) + i + 1)
        assert (step.h2d_bytes, step.d2h_bytes) == expected
    naive = greedy_trace(gpu.loop("naive"), PROMPT, 6)
    kv = gpu.info.kv_bytes_per_token() * len(PROMPT)
    assert all(s.h2d_bytes > kv and s.d2h_bytes > kv for s in naive.steps)


def test_answers_and_figures_through_the_engine(webgpu: Device, layouts: dict[str, Path]) -> None:
    cpu, gpu = engines(layouts["shared-buffer"], webgpu)
    greedy = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=10)
    expected = cpu.generate_ids(PROMPT, greedy, ignore_eos=True).run().token_ids
    for mode in ("naive", "iobinding"):
        stats = gpu.generate_ids(PROMPT, greedy, mode, ignore_eos=True).run()
        assert stats.token_ids == expected
        assert stats.device == webgpu.name
        assert stats.h2d_bytes_per_token > 0 and stats.d2h_bytes_per_token > 0
        # The run clock waits for the device: the run, not the host, holds a step's time.
        assert sum(s.run_s for s in stats.steps) > sum(s.host_s for s in stats.steps)
    assert gpu.device is not CPU and gpu.fallback_reason is None
