"""A loaded model and its contexts (loaded_model.py, model_context.py): every reason a model
runs on the CPU instead of the device asked for comes from `start_model`; each read of the
folder goes through the memory check, once for a load that needs no other graph; and contexts
of one model give the tokens separate engines give.

Devices are emulated on the CPU provider, as tests/engine/test_device_memory.py does: a device
that fails to start, one whose provider refuses the graph, one out of memory for the KV cache,
one without float32 GroupQueryAttention."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from chatapp.convert.converter import NATIVE_MODEL_FILE, ConvertOptions, convert_gguf
from chatapp.engine import loaded_model, model_description
from chatapp.engine.devices import CPU, Device, DeviceError, StartedSession
from chatapp.engine.engine import Engine
from chatapp.engine.errors import DeviceFailure, ModelError
from chatapp.engine.loaded_model import (
    DevicePlan,
    LoadedModel,
    open_model,
    start_model,
    start_with_loop,
)
from chatapp.engine.model_context import ModelContext
from chatapp.engine.modes import Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.folder_format.native_library import usable_isa

GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=8)
CONTEXT = 64
GPU = dataclasses.replace(CPU, name="gpu-test", label="GPU (test)", own_memory=True)
NO_FLOAT32_GQA = dataclasses.replace(GPU, float32_gqa=False)
# A provider this onnxruntime lacks: a session asked for it runs on the CPU provider alone.
ABSENT = dataclasses.replace(GPU, provider="AbsentExecutionProvider")


def fake_device(
    monkeypatch: pytest.MonkeyPatch, device: Device, fail: Exception | None = None
) -> None:
    """Every device name finds `device`; its sessions raise `fail` (a provider that does not
    start), else run on the CPU provider."""
    real_start = loaded_model.start_session

    def start(
        path: Path,
        asked: Device,
        threads: int | None = None,
        precision: str | None = None,
        _graph: bytes | None = None,  # the CPU provider underneath runs the file's graph
    ) -> StartedSession:
        if asked is CPU:
            return real_start(path, CPU, threads, precision)
        if fail is not None:
            raise fail
        return StartedSession(real_start(path, CPU, threads, precision).session, asked)

    monkeypatch.setattr(loaded_model, "find_device", lambda _name: device)
    monkeypatch.setattr(loaded_model, "start_session", start)


def no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Device:
        raise DeviceError(f"The device '{name}' is not available here: no driver. Available: cpu.")

    monkeypatch.setattr(loaded_model, "find_device", missing)


def kv_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_device(monkeypatch, GPU)
    real_make = loaded_model.make_loop

    def make(mode: Mode, session: object, info: object, device: Device, context: int) -> object:
        if device is not CPU:
            raise RuntimeError("Failed to allocate memory for the KV cache")
        return real_make(mode, session, info, device, context)  # type: ignore[arg-type]

    monkeypatch.setattr(loaded_model, "make_loop", make)


# (how the device goes wrong, what the reason says)
FALLBACKS: dict[str, tuple[Callable[[pytest.MonkeyPatch], None], tuple[str, ...]]] = {
    "device not offered": (no_device, ("is not available here: no driver", "Running on the CPU")),
    "provider fails to start": (
        lambda mp: fake_device(mp, GPU, RuntimeError("no driver")),
        ("GPU (test) failed to start (no driver); running on the CPU.",),
    ),
    "provider refuses the graph": (
        lambda mp: fake_device(mp, ABSENT),
        ("GPU (test) is not usable with this model; running on the CPU.",),
    ),
    "out of device memory": (
        kv_out_of_memory,
        ("GPU (test) failed while allocating the KV cache", "Running on the CPU."),
    ),
    "no float32 GroupQueryAttention": (
        lambda mp: fake_device(mp, NO_FLOAT32_GQA),
        ("GPU (test) runs GroupQueryAttention only in float16 or bfloat16", "--attention"),
    ),
}


def counted(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[object]:
    """The first argument of each call to `owner.name` from now on (it still runs)."""
    calls: list[object] = []
    real = getattr(owner, name)

    def wrapper(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_each_reason_to_run_on_the_cpu_comes_from_start_model(
    case: str, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_it_fail, said = FALLBACKS[case]
    make_it_fail(monkeypatch)
    reads = counted(monkeypatch, model_description, "read_model_folder")
    checks = counted(monkeypatch, loaded_model, "check_memory")
    description = open_model(tiny_model_dir, "gpu-test", max_context=CONTEXT)
    model = start_model(description, DevicePlan("gpu-test", threads=1, cpu_if_missing=True))
    assert model.device is CPU
    reason = model.fallback_reason or ""
    assert all(part in reason for part in said), reason
    assert "\n" not in reason
    # Read once, for the device: the CPU would choose the same graph (this folder has no
    # native one), and the device's memory check covered the CPU's need.
    assert reads == [tiny_model_dir] and len(checks) == 1
    assert model.description.on_cpu and model.max_context == CONTEXT
    tokens = ModelContext(model).generate_ids([1, 5, 9], GREEDY, ignore_eos=True).run()
    assert len(tokens.token_ids) == GREEDY.max_new_tokens


@pytest.mark.skipif(usable_isa() is None, reason="native kernels not built here")
def test_a_fallback_that_runs_another_graph_reads_it_through_the_memory_check(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = convert_gguf(tiny_gguf, tmp_path / "both", ConvertOptions(graph="both"))
    fake_device(monkeypatch, GPU, RuntimeError("no driver"))
    reads = counted(monkeypatch, model_description, "read_model_folder")
    checks = counted(monkeypatch, loaded_model, "check_memory")
    description = open_model(folder, "gpu-test", max_context=CONTEXT)
    assert description.info.onnx_file == "model.onnx" and not description.cpu_same
    model = start_model(description, DevicePlan("gpu-test", threads=1))
    assert model.device is CPU and model.info.onnx_file == NATIVE_MODEL_FILE
    assert reads == [folder, folder] and len(checks) == 2  # the second read checked too


def test_a_device_not_offered_is_refused_where_the_plan_does_not_allow_the_cpu(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_device(monkeypatch)
    description = open_model(tiny_model_dir, "gpu-test", max_context=CONTEXT)
    with pytest.raises(DeviceError, match="not available here"):
        start_model(description, DevicePlan("gpu-test", threads=1))  # the command line's plan


def test_a_load_that_runs_where_asked_reads_the_folder_once(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_device(monkeypatch, GPU)
    reads = counted(monkeypatch, model_description, "read_model_folder")
    checks = counted(monkeypatch, loaded_model, "check_memory")
    description = open_model(tiny_model_dir, "gpu-test", max_context=CONTEXT)
    model = start_model(description, DevicePlan("gpu-test", threads=1))
    assert model.device is GPU and model.fallback_reason is None
    assert reads == [tiny_model_dir] and len(checks) == 1
    assert model.description is description  # nothing read again


def test_a_device_failure_mid_answer_asks_the_model_for_one_on_the_cpu(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_device(monkeypatch, GPU)
    model = start_model(open_model(tiny_model_dir, max_context=CONTEXT), DevicePlan(threads=1))
    assert model.device is GPU
    checks = counted(monkeypatch, loaded_model, "check_memory")
    failure = DeviceFailure(GPU.label, RuntimeError("VK_ERROR_DEVICE_LOST"))
    on_cpu = model.on_cpu(failure)
    assert on_cpu is not model and model.device is GPU  # the loaded model itself never changes
    assert on_cpu.device is CPU and on_cpu.tokenizer is model.tokenizer
    assert on_cpu.fallback_reason == f"{failure} Running on the CPU."
    assert checks == []  # read for the CPU already: not read again


def test_an_engine_falls_back_through_its_loaded_model(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_device(monkeypatch, GPU)
    engine = Engine(tiny_model_dir, "gpu-test", threads=1, max_context=CONTEXT)
    before = engine.generate_ids([1, 5, 9], GREEDY, ignore_eos=True).run().token_ids
    first: LoadedModel = engine.loaded
    engine.fall_back_to_cpu("GPU (test) failed during the answer (lost).")
    assert engine.loaded is not first and engine.device is CPU
    assert (
        engine.fallback_reason == "GPU (test) failed during the answer (lost). Running on the CPU."
    )
    assert engine.generate_ids([1, 5, 9], GREEDY, ignore_eos=True).run().token_ids == before


def test_two_contexts_of_one_model_give_the_tokens_of_two_engines(tiny_model_dir: Path) -> None:
    prompts = ([1, 5, 9, 2, 7, 3], [4, 8, 15, 16, 23])
    follow = [11, 12]
    engines = [Engine(tiny_model_dir, threads=1, max_context=CONTEXT) for _ in prompts]
    expected = []
    for engine, prompt in zip(engines, prompts, strict=True):
        first = engine.generate_ids(prompt, GREEDY, ignore_eos=True).run().token_ids
        again = [*prompt, *first, *follow]  # a follow-up: the cached prefix is kept
        expected.append(
            (first, engine.generate_ids(again, GREEDY, ignore_eos=True).run().token_ids)
        )

    model = engines[0].loaded
    for mode in (Mode.IOBINDING, Mode.NAIVE):
        contexts = [model.new_context(mode) for _ in prompts]
        got: list[tuple[list[int], list[int]]] = []
        # Their steps interleaved: one shared session, each context its own KV cache.
        gens = [
            c.generate_ids(p, GREEDY, ignore_eos=True)
            for c, p in zip(contexts, prompts, strict=True)
        ]
        running = [iter(gen) for gen in gens]
        while running:  # one event of each in turn
            running = [it for it in running if next(it, None) is not None]
        firsts = [gen.stats.token_ids for gen in gens]
        for context, prompt, first in zip(contexts, prompts, firsts, strict=True):
            again = [*prompt, *first, *follow]
            stats = context.generate_ids(again, GREEDY, ignore_eos=True).run()
            assert stats.reused_tokens > 0  # its own cache, untouched by the other context
            got.append((first, stats.token_ids))
        assert got == expected, mode


def test_the_device_trial_loop_is_the_first_contexts_and_kept(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_device(monkeypatch, GPU)
    loops = counted(monkeypatch, loaded_model, "make_loop")
    description = open_model(tiny_model_dir, "gpu-test", max_context=CONTEXT)
    model, first = start_with_loop(description, DevicePlan("gpu-test", threads=1))
    context = ModelContext(model, first=first)  # made by its owner, in the loop allocated
    assert model.device is GPU and first is not None and len(loops) == 1
    tokens = context.generate_ids([1, 5, 9], GREEDY, ignore_eos=True).run()
    assert len(tokens.token_ids) == GREEDY.max_new_tokens
    assert len(loops) == 1  # the answer ran in the loop the start allocated


def test_a_start_that_fails_reads_no_tokenizer(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*_args: object) -> object:
        raise RuntimeError("the provider refuses everything")

    monkeypatch.setattr(loaded_model, "start_session", refused)
    tokenizers = counted(monkeypatch, loaded_model, "ChatTokenizer")
    description = open_model(tiny_model_dir, max_context=CONTEXT)
    with pytest.raises(ModelError, match="onnxruntime cannot run"):
        start_model(description, DevicePlan(threads=1))
    assert tokenizers == []


def test_a_fallback_after_the_session_started_builds_the_tokenizer_once(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kv_out_of_memory(monkeypatch)  # the device's session starts, its KV cache does not fit
    tokenizers = counted(monkeypatch, loaded_model, "ChatTokenizer")
    description = open_model(tiny_model_dir, "gpu-test", max_context=CONTEXT)
    model = start_model(description, DevicePlan("gpu-test", threads=1))
    assert model.device is CPU and len(tokenizers) == 1


def test_a_grammar_asked_for_at_once_is_made_once_and_a_failure_is_tried_again() -> None:
    import threading

    once: loaded_model.Once[object] = loaded_model.Once()
    made: list[int] = []
    started = threading.Event()

    def make() -> object:
        started.set()
        made.append(1)
        threading.Event().wait(0.2)  # the second asker arrives meanwhile
        return object()

    got: list[object] = []
    first = threading.Thread(target=lambda: got.append(once.get(make)))
    first.start()
    started.wait()
    got.append(once.get(make))
    first.join()
    assert made == [1] and got[0] is got[1]

    failing: loaded_model.Once[object] = loaded_model.Once()

    def broken() -> object:
        raise ModelError("no table")

    for _ in range(2):  # each asker hears the failure; nothing is kept
        with pytest.raises(ModelError, match="no table"):
            failing.get(broken)
    assert failing.get(object) is not None


def test_the_load_makes_no_constraint_compiler(tiny_model_dir: Path) -> None:
    model = start_model(open_model(tiny_model_dir), DevicePlan(threads=1))
    assert model.grammar._made is None
    compiler = model.constraints
    assert model.constraints is compiler
    fallback = model.on_cpu("the device failed")
    assert fallback.constraints is compiler  # the CPU's model keeps the token table
