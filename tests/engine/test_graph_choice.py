"""Which graph a folder holds (`chatapp convert --graph`) and which one a session runs: the native
graph (chatapp's GGUF kernels) on the CPU where the library runs its fast kernels, the stock one
on any other device or without the library; the sentences that say what to do otherwise."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import onnxruntime as ort
import pytest

from chatapp.cli.main import main
from chatapp.convert import default_model, needs
from chatapp.convert.converter import (
    NATIVE_MODEL_FILE,
    ConvertOptions,
    convert_gguf,
    earlier_conversion,
    graphs_to_write,
    read_manifest,
)
from chatapp.convert.preflight import read_header
from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.engine import loaded_model as engine_module
from chatapp.engine.devices import (
    CPU,
    Device,
    DeviceError,
    StartedSession,
    create_session,
    needs_native,
    session_options,
)
from chatapp.engine.engine import Engine
from chatapp.engine.loaded_model import DevicePlan, start_model
from chatapp.engine.model_description import open_model_folder, read_model
from chatapp.engine.model_folder.variants import folder_variants
from chatapp.engine.native_kernels import (
    NativeKernelsUnavailable,
    library_path,
)
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.text.chat import Message
from chatapp.folder_format.native_library import LIBRARY_ENV, usable_isa
from tests.tiny_model import write_tiny_gguf

USABLE = usable_isa() is not None
WITH_LIBRARY = pytest.mark.skipif(
    not USABLE, reason="native kernels not built here, or only their scalar fallback"
)
GREEDY = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=10)
GPU = Device("cuda", "CUDAExecutionProvider", "cuda", "a test GPU", own_memory=True)


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tied=False, seed=1)


@pytest.fixture(scope="module")
def both(gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return convert_gguf(gguf, tmp_path_factory.mktemp("both") / "m", ConvertOptions(graph="both"))


@pytest.fixture
def no_library(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LIBRARY_ENV, "none")


def graph_of(folder: Path, name: str = "model.onnx") -> str:
    return "native" if needs_native(folder / name) else "stock"


def test_both_writes_the_stock_graph_as_model_onnx_and_the_native_one_beside_it(
    both: Path,
) -> None:
    assert graph_of(both) == "stock" and graph_of(both, NATIVE_MODEL_FILE) == "native"
    genai = json.loads((both / "genai_config.json").read_text())
    assert genai["model"]["decoder"]["filename"] == "model.onnx"  # other tools run the stock one
    manifest = read_manifest(both)
    assert manifest is not None
    assert manifest["graphs"] == {"model.onnx": "stock", NATIVE_MODEL_FILE: "gguf"}
    assert manifest["options"]["graph"] == "both" and "native" not in manifest["options"]
    assert {"model.onnx", NATIVE_MODEL_FILE} <= set(manifest["files"])


def test_auto_without_the_library_writes_the_stock_graph(
    gguf: Path, tmp_path: Path, no_library: None
) -> None:
    folder = convert_gguf(gguf, tmp_path / "m", ConvertOptions(graph="auto"))
    assert graph_of(folder) == "stock" and not (folder / NATIVE_MODEL_FILE).exists()
    manifest = read_manifest(folder)
    assert manifest is not None and manifest["options"]["graph"] == "stock"


@WITH_LIBRARY
def test_auto_with_the_library_writes_the_native_graph(gguf: Path, tmp_path: Path) -> None:
    folder = convert_gguf(gguf, tmp_path / "m", ConvertOptions(graph="auto"))
    assert graph_of(folder) == "native" and not (folder / NATIVE_MODEL_FILE).exists()


def test_a_scalar_only_library_counts_as_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATAPP_GGUF_ISA", "scalar")  # what the kernels pick on a CPU without AVX2
    assert usable_isa() is None
    assert ConvertOptions(graph="auto").resolved().graph == "stock"


def test_a_file_without_a_tensor_the_kernels_take_gets_the_stock_graph(tmp_path: Path) -> None:
    f16 = write_tiny_gguf(tmp_path / "f16.gguf", qtype="F16", embed_qtype="F16")
    header = read_header(f16)
    for graph in ("native", "both", "stock"):
        assert graphs_to_write(graph, header) == (("model.onnx", False),)
    folder = convert_gguf(f16, tmp_path / "m", ConvertOptions(graph="both"))
    assert graph_of(folder) == "stock" and not (folder / NATIVE_MODEL_FILE).exists()


def test_the_command_line_takes_graph_and_native(gguf: Path, tmp_path: Path) -> None:
    # Each in its own folder: a conversion beside it with both graphs would be taken as done.
    assert main(["convert", str(gguf), str(tmp_path / "1" / "b"), "--graph", "both"]) == 0
    assert graph_of(tmp_path / "1" / "b", NATIVE_MODEL_FILE) == "native"
    assert main(["convert", str(gguf), str(tmp_path / "2" / "n"), "--native"]) == 0
    assert graph_of(tmp_path / "2" / "n") == "native"
    manifest = read_manifest(tmp_path / "2" / "n")
    assert manifest is not None and manifest["options"]["graph"] == "native"


def test_a_folder_with_both_graphs_is_an_earlier_conversion_of_either(
    gguf: Path, both: Path
) -> None:
    for graph in ("native", "stock", "both"):
        assert earlier_conversion(gguf, both, ConvertOptions(graph=graph)) == both


def test_preflight_counts_a_native_graph_at_about_the_ggufs_size(gguf: Path, both: Path) -> None:
    header = read_header(gguf)
    stock = needs.estimate(header)
    native = needs.estimate(header, graphs=(("model.onnx", True),))
    two = needs.estimate(header, graphs=graphs_to_write("both", header))
    assert max(stock.disk, native.disk) < two.disk < stock.disk + native.disk  # files once
    assert sum(p.stat().st_size for p in both.iterdir()) <= two.disk
    assert two.memory == max(stock.memory, native.memory)  # one graph after the other


# ---- which graph a session runs --------------------------------------------------------------
@WITH_LIBRARY
def test_on_the_cpu_with_the_library_the_native_graph_runs(both: Path) -> None:
    assert open_model_folder(both).onnx_file == NATIVE_MODEL_FILE
    engine = Engine(both, threads=1, max_context=64)
    assert engine.info.onnx_file == NATIVE_MODEL_FILE
    assert engine.model.kernels.startswith("GGUF kernels, AVX")
    statuses = {s.variant.path: s for s in folder_variants(both)}
    assert statuses[NATIVE_MODEL_FILE].variant.precision == "gguf"
    assert statuses[NATIVE_MODEL_FILE].default and not statuses["model.onnx"].default


def test_without_the_library_the_stock_graph_runs(both: Path, no_library: None) -> None:
    engine = Engine(both, threads=1, max_context=64)
    assert engine.info.onnx_file == "model.onnx"
    assert engine.model.kernels == "ONNX Runtime kernels"
    statuses = {s.variant.path: s for s in folder_variants(both)}
    assert statuses["model.onnx"].default
    problem = statuses[NATIVE_MODEL_FILE].problem
    assert problem is not None and "make native" in problem


def test_on_another_device_the_stock_graph_runs(both: Path) -> None:
    assert open_model_folder(both, on_cpu=False).onnx_file == "model.onnx"
    statuses = {s.variant.path: s for s in folder_variants(both, on_cpu=False)}
    assert statuses["model.onnx"].default and not statuses[NATIVE_MODEL_FILE].default


@WITH_LIBRARY
def test_onnx_file_picks_either_graph(both: Path) -> None:
    for name in ("model.onnx", NATIVE_MODEL_FILE):
        assert Engine(both, threads=1, max_context=64, onnx_file=name).info.onnx_file == name


@WITH_LIBRARY
def test_both_loops_give_the_same_tokens_on_each_graph(both: Path) -> None:
    tokens = {}
    for name in ("model.onnx", NATIVE_MODEL_FILE):
        engine = Engine(both, threads=2, max_context=64, onnx_file=name)
        for mode in ("naive", "iobinding"):
            run = engine.generate_ids([1, 5, 9, 2, 7], GREEDY, mode, ignore_eos=True).run()
            tokens[name, mode] = tuple(run.token_ids)
    assert len(set(tokens.values())) == 1, tokens


# ---- a native-only folder where its kernels cannot run ---------------------------------------
@pytest.fixture(scope="module")
def native_only(gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("native") / "m"
    return convert_gguf(gguf, folder, ConvertOptions(graph="native"))


def test_without_the_library_a_native_only_folder_is_refused_in_one_sentence(
    native_only: Path, no_library: None
) -> None:
    with pytest.raises(NativeKernelsUnavailable) as caught:
        Engine(native_only, threads=1)
    message = str(caught.value)
    assert "make native" in message and "--graph stock" in message and "\n" not in message


def test_on_a_device_a_native_only_folder_names_the_fix(
    native_only: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert open_model_folder(native_only, on_cpu=False).onnx_file == "model.onnx"  # its only one
    monkeypatch.setattr(engine_module, "find_device", lambda _name: GPU)
    description = read_model(native_only, device="cuda", max_context=64)
    plan = DevicePlan("cuda", threads=1)
    if library_path() is None:  # the CPU fallback needs the library too: refused there
        with pytest.raises(NativeKernelsUnavailable, match="make native"):
            start_model(description, plan)
        return
    model = start_model(description, plan)
    assert isinstance(model.session, ort.InferenceSession)
    assert model.device is CPU
    reason = model.fallback_reason or ""
    assert "CPU only" in reason and "with that device selected" in reason
    assert "--graph both" in reason
    assert "a test GPU" in reason and "\n" not in reason


# ---- the default model: both graphs ------------------------------------------------------------
@pytest.mark.default_model
def test_the_default_model_holds_both_graphs(default_model_dir: Path) -> None:
    manifest = read_manifest(default_model_dir)
    assert manifest is not None
    assert manifest["graphs"] == {"model.onnx": "stock", NATIVE_MODEL_FILE: "gguf"}
    assert open_model_folder(default_model_dir, on_cpu=False).onnx_file == "model.onnx"


@pytest.mark.default_model
@WITH_LIBRARY
def test_the_default_models_graphs_answer_alike_in_both_loops(
    default_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each graph's loops give identical tokens, and the native graph's are the stock graph's
    on the default question (as tests/convert/test_native_models.py checks on tiny models), at
    the exact precision: the fast one (8-bit activations) answers as llama.cpp does, "L'Étoile,
    la ..." on this question, not as the stock graph."""
    monkeypatch.setenv("CHATAPP_GGUF_PRECISION", "exact")
    answers = {}
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=24)
    for name in ("model.onnx", NATIVE_MODEL_FILE):
        engine = Engine(default_model_dir, threads=2, max_context=256, onnx_file=name)
        for mode in ("naive", "iobinding"):
            engine.reset()
            gen = engine.chat([Message("user", "What is the capital of France?")], settings, mode)
            ids = tuple(gen.run().token_ids)
            answers[name, mode] = (gen.text, ids)
    assert len(set(answers.values())) == 1, answers
    assert "Paris" in answers["model.onnx", "naive"][0]


def test_a_folder_of_the_previous_converter_version_still_opens(gguf: Path, tmp_path: Path) -> None:
    folder = convert_gguf(gguf, tmp_path / "m", ConvertOptions())
    manifest_path = folder / "chatapp-manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["converter_version"] = "8"  # as version 8 wrote it: a native flag, no graphs
    manifest["options"] = {**manifest["options"], "native": False}
    del manifest["options"]["graph"], manifest["graphs"]
    manifest_path.write_text(json.dumps(manifest))
    assert Engine(folder, threads=1, max_context=64).info.onnx_file == "model.onnx"


def test_prepare_rebuilds_a_default_folder_without_both_graphs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    folder = default_model.models_dir() / default_model.FOLDER_NAME
    folder.mkdir(parents=True)
    monkeypatch.setattr(default_model, "bundled_gguf", lambda: tmp_path / "x.gguf")
    monkeypatch.setattr(default_model, "sha256_file", lambda _p: "0" * 64)
    monkeypatch.setattr(default_model, "is_verified_copy", lambda _f, _s: True)
    converted: list[ConvertOptions] = []
    monkeypatch.setattr(
        default_model, "convert_gguf", lambda _g, _f, opts, _p: converted.append(opts)
    )
    for graph, rebuilt in (("stock", True), ("both", False)):
        manifest = {"options": {"graph": graph}}
        monkeypatch.setattr(default_model, "read_manifest", lambda _f, m=manifest: m)
        converted.clear()
        assert default_model.prepare_default_model()[1] is rebuilt
        assert [o.graph for o in converted] == (["both"] if rebuilt else [])


def test_a_real_device_runs_the_stock_graph_of_a_folder_with_both(both: Path) -> None:
    """Software WebGPU (Vulkan on the CPU) where this machine has it: a device, not the CPU."""
    try:
        engine = Engine(both, "webgpu-software", threads=1, max_context=64)
    except DeviceError as exc:
        pytest.skip(f"no software WebGPU here: {exc}")
    assert engine.info.onnx_file == "model.onnx"
    assert engine.device.name == "webgpu-software" and engine.fallback_reason is None


# ---- after a device failure ------------------------------------------------------------------
EMULATED = dataclasses.replace(CPU, name="emulated", label="Emulated device", own_memory=True)


@pytest.fixture
def emulated_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """'emulated' is a device with its own memory whose sessions run on the CPU provider."""

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


@WITH_LIBRARY
def test_after_a_device_failure_the_cpu_runs_the_native_graph(
    both: Path, emulated_device: None
) -> None:
    engine = Engine(both, "emulated", threads=1, max_context=64)
    assert engine.fallback_reason is None
    assert engine.info.onnx_file == "model.onnx"  # a device runs the stock graph
    on_device = engine.generate_ids([1, 5, 9, 2, 7], GREEDY, ignore_eos=True).run().token_ids
    engine.fall_back_to_cpu("The device failed. The next answer runs on the CPU.")
    assert engine.device is CPU and engine.info.onnx_file == NATIVE_MODEL_FILE
    assert engine.model.kernels.startswith("GGUF kernels")
    after = engine.generate_ids([1, 5, 9, 2, 7], GREEDY, ignore_eos=True).run().token_ids
    assert after == on_device


@WITH_LIBRARY
def test_a_graph_the_user_picked_is_kept_after_a_device_failure(
    both: Path, emulated_device: None
) -> None:
    engine = Engine(both, "emulated", threads=1, max_context=64, onnx_file="model.onnx")
    engine.fall_back_to_cpu("The device failed.")
    assert engine.device is CPU and engine.info.onnx_file == "model.onnx"
