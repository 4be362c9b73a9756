"""The device's warm-up before a first answer: progress, nothing left behind, same tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp.engine.devices import DeviceError, find_device
from chatapp.engine.engine import Engine
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.warm_up import STEPS, needs_warm_up, warm_up

PROMPT = [5, 77, 130, 9, 41]


def greedy(n: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Engine:
    return Engine(tiny_model_dir, threads=1, max_context=128)


@pytest.mark.parametrize("mode", ["naive", "iobinding"])
def test_the_cpu_needs_no_warm_up(engine: Engine, mode: str) -> None:
    assert not engine.needs_warm_up(mode)


@pytest.mark.parametrize("mode", ["naive", "iobinding"])
def test_warm_up_reports_each_run_and_leaves_the_cache_empty(engine: Engine, mode: str) -> None:
    loop = engine.loop(mode)
    loop.reset()
    before = engine.generate_ids(PROMPT, greedy(12), mode, ignore_eos=True).run().token_ids
    progress = list(warm_up(loop))
    assert [p.done for p in progress] == list(range(STEPS + 1))
    assert all(p.steps == STEPS for p in progress)
    assert progress[-1].finished and not progress[0].finished
    assert [p.elapsed_s for p in progress] == sorted(p.elapsed_s for p in progress)
    assert loop.cached == [] and loop.warmed_up
    after = engine.generate_ids(PROMPT, greedy(12), mode, ignore_eos=True).run()
    assert after.reused_tokens == 0  # nothing of the warm-up is taken for the prompt
    assert after.token_ids == before


def test_a_device_with_programs_is_warmed_once(tiny_model_dir: Path) -> None:
    for name in ("webgpu", "webgpu-software"):
        try:
            find_device(name)
        except DeviceError:
            continue
        gpu = Engine(tiny_model_dir, name, threads=1, max_context=64)
        if gpu.device.name != name:
            pytest.skip(f"{name} fell back: {gpu.fallback_reason}")
        assert gpu.needs_warm_up("iobinding") and needs_warm_up(gpu.loop("iobinding"))
        assert list(gpu.warm_up("iobinding"))[-1].finished
        assert not gpu.needs_warm_up("iobinding")
        assert gpu.needs_warm_up("naive")  # each loop runs its own first steps
        return
    pytest.skip("no WebGPU device here")
