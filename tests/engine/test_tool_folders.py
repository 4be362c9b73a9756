"""Model folders made by other tools (scripts/make_onnx_fixtures.py), in every loop.

Each fixture folder holds what Optimum's exporter, the onnx-community quantizers or
onnxruntime-genai's builder wrote for a tiny random-weight Llama / Qwen2, and `expected.json`:
for a fixed prompt of ids, the greedy tokens the tool's own runtime generated, where they are a
fact about the graph rather than about the CPU that ran it.

- Float graphs (fp32, fp16, MatMulNBits computed in float): ONNX Runtime's kernels only reorder
  sums by instruction set, which moves these logits by under 1e-5 (fp32; fp16 graphs, fused
  against unfused, by 0.021). Their tokens are stored, and every stored token must lead its
  runner-up by `MIN_MARGIN` on the running machine (the smallest lead is 0.049).
- Graphs whose activations are quantized to int8 at run time (`ort_reference.cpu_dependent`:
  DynamicQuantizeLinear / MatMulInteger, MatMulNBits at accuracy level 4): the integer kernels
  sum differently by instruction set (AVX2 saturates int16 pairs, AVX-512 VNNI does not), and a
  near-tie goes either way (onnx-community's int8 graph: 0.018 apart on one machine, 0.058 on
  another). Nothing is stored: an independent greedy loop over a plain InferenceSession
  (tests/engine/ort_reference.py) computes the tokens on the running machine, and every loop
  must give them exactly.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from chatapp.engine.engine import Engine
from chatapp.engine.errors import ModelError
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.model_folder.model import KVLayout
from chatapp.engine.model_folder.variants import folder_variants
from chatapp.engine.modes import MODES, Mode
from chatapp.engine.sampling import SamplingSettings
from tests.engine.device_checks import Trace, greedy_trace
from tests.engine.ort_reference import cpu_dependent, greedy_tokens

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "onnx_folders"
# The lead a stored token needs over its runner-up at every step: over twice the most that
# kernels move a float graph's logit here (0.021), and below the smallest lead stored (0.049,
# optimum-qwen2's first step; every other float graph's is at least 0.10).
MIN_MARGIN = 0.045
ON_THE_RUNNING_MACHINE = "on_the_running_machine"  # a variant's entry instead of its tokens


def expected(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "expected.json").read_text(encoding="utf-8"))


def cases(*, stored: bool | None = None) -> list[Any]:
    """(folder, variant) of every fixture graph; only the float ones (stored=True) or only the
    CPU-dependent ones (stored=False)."""
    found = []
    for folder in sorted(p for p in FIXTURES.iterdir() if (p / "expected.json").is_file()):
        for variant in expected(folder)["variants"]:
            if stored is None or stored == (cpu_dependent(folder / variant) is None):
                found.append(pytest.param(folder, variant, id=f"{folder.name}:{variant}"))
    return found


def stored_tokens(folder: Path, variant: str) -> list[int] | None:
    """A float graph's stored tokens; None for one whose tokens depend on the CPU."""
    data = expected(folder)
    want = data["variants"][variant]
    why = cpu_dependent(folder / variant)
    if why is not None:
        assert isinstance(want, dict) and want.get(ON_THE_RUNNING_MACHINE) == why, (
            f"{variant}: {why}, so its tokens depend on the CPU: store none"
        )
        return None
    assert isinstance(want, list), f"{data['runtime']} could not run {variant}: {want}"
    return want


@cache
def reference(folder: Path, variant: str, cached: bool) -> list[int]:
    """The independent loop's greedy tokens on this machine (ort_reference.py)."""
    data = expected(folder)
    run = greedy_tokens(folder, variant, data["prompt_ids"], data["new_tokens"], cache=cached)
    return run.tokens


def greedy(folder: Path, onnx_file: str | None, mode: str, prompt: list[int], n: int) -> list[int]:
    engine = Engine(folder, mode=mode, threads=1, onnx_file=onnx_file)
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)
    return engine.generate_ids(prompt, settings, ignore_eos=True).run().token_ids


def naive_trace(folder: Path, variant: str) -> Trace:
    """Greedy tokens and their logit rows from the naive loop, on this machine's kernels."""
    data = expected(folder)
    engine = Engine(folder, mode="naive", threads=1, onnx_file=variant)
    return greedy_trace(engine.loop("naive"), data["prompt_ids"], data["new_tokens"])


def assert_clear_choices(trace: Trace, want: list[int]) -> None:
    """Each stored token is the one chosen here, ahead of the runner-up by MIN_MARGIN."""
    for i, (got, stored) in enumerate(zip(trace.tokens, want, strict=True)):
        row = trace.logits[i]
        assert got == stored, f"step {i}: {got} chosen over the stored {stored}"
        lead = float(row[stored] - np.delete(row, stored).max())
        assert lead >= MIN_MARGIN, (
            f"step {i}: the stored {stored} leads by {lead:.4f} only: kernels may order it"
        )


def test_every_kind_of_folder_is_there() -> None:
    names = {p.name for p in FIXTURES.iterdir()}
    for kind in ("optimum-", "onnx-community-", "genai-", "optimum-llama-legacy"):
        assert any(n.startswith(kind) for n in names), kind


@pytest.mark.parametrize(("folder", "variant"), cases())
@pytest.mark.parametrize("mode", MODES)
def test_tokens_match_the_tools_own_runtime(folder: Path, variant: str, mode: str) -> None:
    data = expected(folder)
    want = stored_tokens(folder, variant)
    if want is None:
        # Computed here. Without a cache each run quantizes the whole sequence's activations
        # with one scale (not a one-token step's): the reference runs the same way.
        want = reference(folder, variant, cached=mode != Mode.NOCACHE)
    assert greedy(folder, variant, mode, data["prompt_ids"], data["new_tokens"]) == want


@pytest.mark.parametrize(("folder", "variant"), cases(stored=True))
def test_stored_tokens_are_clear_choices(folder: Path, variant: str) -> None:
    want = stored_tokens(folder, variant)
    assert want is not None
    assert_clear_choices(naive_trace(folder, variant), want)


@pytest.mark.parametrize(("folder", "variant"), cases(stored=True))
def test_the_reference_loop_gives_the_tools_tokens(folder: Path, variant: str) -> None:
    """The independent loop, cached or not, agrees with Optimum's and onnxruntime-genai's
    runtimes wherever their tokens are stored: it can stand in for them on the others."""
    want = stored_tokens(folder, variant)
    assert reference(folder, variant, cached=True) == want
    assert reference(folder, variant, cached=False) == want


def test_graphs_with_int8_activations_are_found() -> None:
    found = {
        f"{folder.name}:{variant}": cpu_dependent(folder / variant) is not None
        for folder in sorted(FIXTURES.iterdir())
        for variant in expected(folder)["variants"]
    }
    dependent = {name for name, flag in found.items() if flag}
    assert dependent == {
        "genai-llama-int4:model.onnx",  # MatMulNBits, accuracy_level 4
        "genai-qwen2-int4:model.onnx",
        "onnx-community-llama:onnx/model_quantized.onnx",  # DynamicQuantizeLinear
    }
    assert found["onnx-community-llama:onnx/model_q4.onnx"] is False  # MatMulNBits in float


def test_default_variant_is_the_most_precise_one() -> None:
    community = FIXTURES / "onnx-community-llama"
    assert open_model_folder(community).onnx_path.name == "model.onnx"
    # Without the fp32 graph, fp16 comes before the quantized ones (not model_q4 by name).
    statuses = folder_variants(community)
    precisions = [s.variant.precision for s in statuses]
    assert precisions == ["fp32", "fp16", "int8", "q4", "q4f16"]
    assert [s.default for s in statuses] == [True, False, False, False, False]
    assert all(s.problem is None for s in statuses)
    fp32 = next(s.variant for s in statuses if s.variant.precision == "fp32")
    assert fp32.size_bytes == (community / "onnx" / "model.onnx").stat().st_size


def test_without_the_fp32_graph_fp16_is_the_default(tmp_path: Path) -> None:
    folder = shutil.copytree(FIXTURES / "onnx-community-llama", tmp_path / "m")
    (folder / "onnx" / "model.onnx").unlink()
    info = open_model_folder(folder)
    assert info.onnx_path.name == "model_fp16.onnx"
    assert info.kv_dtype == np.float16 and info.logits_dtype == np.float16


def test_external_data_counts_in_the_size() -> None:
    folder = FIXTURES / "optimum-llama-external-data"
    [status] = folder_variants(folder)
    data = folder / "model.onnx_data"
    assert status.variant.size_bytes == (folder / "model.onnx").stat().st_size + data.stat().st_size
    assert status.variant.precision == "fp32"


def test_genai_variant_precision_comes_from_the_graph() -> None:
    [status] = folder_variants(FIXTURES / "genai-llama-int4")
    assert status.variant.precision == "q4"  # MatMulNBits, float32 activations
    assert status.variant.name_precision is None  # "model.onnx" says nothing


def test_legacy_folder_opens_the_merged_decoder() -> None:
    folder = FIXTURES / "optimum-llama-legacy"
    info = open_model_folder(folder)
    assert info.onnx_path.name == "decoder_model_merged.onnx"
    assert info.io.use_cache_branch == "use_cache_branch"
    assert info.layout is KVLayout.CONCAT
    with pytest.raises(ModelError, match=r"decoder_model_merged\.onnx or decoder_with_past"):
        open_model_folder(folder, "decoder_model.onnx")
    problems = {s.variant.path: s.problem for s in folder_variants(folder)}
    assert problems["decoder_model_merged.onnx"] is None
    assert problems["decoder_model.onnx"] is not None


def test_genai_head_shape_comes_from_its_config() -> None:
    info = open_model_folder(FIXTURES / "genai-llama-fp32")
    graph = onnx.load(str(info.onnx_path), load_external_data=False).graph
    past = next(i for i in graph.input if i.name == info.kv[0].past_name)
    assert past.type.tensor_type.shape.dim[3].dim_param  # the builder leaves it symbolic
    assert (info.kv_heads, info.head_dim) == (2, 16)
    assert info.layout is KVLayout.SHARED_BUFFER


def test_symbolic_head_size_without_configs_is_explained(tmp_path: Path) -> None:
    folder = shutil.copytree(FIXTURES / "genai-llama-fp32", tmp_path / "m")
    config = json.loads((folder / "genai_config.json").read_text())
    del config["model"]["decoder"]["head_size"]
    del config["model"]["decoder"]["hidden_size"]
    (folder / "genai_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="does not state its head count and size"):
        open_model_folder(folder)


def rename_io(folder: Path, renames: dict[str, str]) -> None:
    """Rename graph inputs / outputs everywhere they are used (keeps external data as is)."""
    path = folder / "model.onnx"
    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    for value in (*graph.input, *graph.output):
        value.name = renames.get(value.name, value.name)
    for node in graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    onnx.save(model, str(path))


def test_genai_config_names_are_honoured(tmp_path: Path) -> None:
    source = FIXTURES / "genai-llama-fp32"
    folder = shutil.copytree(source, tmp_path / "m")
    renames = {"input_ids": "tokens", "attention_mask": "mask", "logits": "scores"}
    for layer in range(2):
        for kind, short in (("key", "k"), ("value", "v")):
            renames[f"past_key_values.{layer}.{kind}"] = f"cache_in.{layer}.{short}"
            renames[f"present.{layer}.{kind}"] = f"cache_out.{layer}.{short}"
    rename_io(folder, renames)
    config = json.loads((folder / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    decoder["inputs"] = {
        "input_ids": "tokens",
        "attention_mask": "mask",
        "past_key_names": "cache_in.%d.k",
        "past_value_names": "cache_in.%d.v",
    }
    decoder["outputs"] = {
        "logits": "scores",
        "present_key_names": "cache_out.%d.k",
        "present_value_names": "cache_out.%d.v",
    }
    (folder / "genai_config.json").write_text(json.dumps(config))
    info = open_model_folder(folder)
    assert info.kv[1].past_name == "cache_in.0.v" and info.io.logits == "scores"
    data = expected(source)
    for mode in MODES:
        got = greedy(folder, None, mode, data["prompt_ids"], data["new_tokens"])
        assert got == data["variants"]["model.onnx"], mode


def test_a_named_input_the_graph_lacks_is_named(tmp_path: Path) -> None:
    folder = shutil.copytree(FIXTURES / "genai-llama-fp32", tmp_path / "m")
    config = json.loads((folder / "genai_config.json").read_text())
    config["model"]["decoder"]["inputs"]["input_ids"] = "token_ids"
    (folder / "genai_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match="no 'token_ids' input"):
        open_model_folder(folder)


class RecordingSession:
    """A loop's session that notes the use_cache_branch flag each run is given."""

    def __init__(self, loop: Any) -> None:
        self.session, self.loop = loop.session, loop
        self.flags: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def run(self, names: Any, feeds: dict[str, np.ndarray], run_options: Any = None) -> Any:
        self.flags.append(bool(feeds["use_cache_branch"][0]))
        return self.session.run(names, feeds, run_options)

    def run_with_iobinding(self, binding: Any, run_options: Any = None) -> None:
        self.flags.append(bool(self.loop._branch[0]))  # the bound buffer, read at run time
        self.session.run_with_iobinding(binding, run_options)


def test_use_cache_branch_is_false_only_while_the_cache_is_empty() -> None:
    folder = FIXTURES / "optimum-llama-legacy"
    settings = SamplingSettings(temperature=0.0, max_new_tokens=3)
    for mode in ("naive", "iobinding"):
        engine = Engine(folder, mode=mode, threads=1)
        loop = engine.loop()
        recording = RecordingSession(loop)
        loop.session = recording  # type: ignore[assignment]
        engine.generate_ids([5, 6, 7], settings, ignore_eos=True).run()
        engine.reset()  # a new chat starts from an empty cache again
        engine.generate_ids([5, 6, 7], settings, ignore_eos=True).run()
        assert recording.flags == [False, True, True, False, True, True], mode


def test_a_stored_token_must_lead_clearly() -> None:
    rows = np.zeros((3, 5), dtype=np.float32)
    rows[:, 1] = 1.0  # token 1 clearly first at every step...
    assert_clear_choices(Trace(tokens=[1, 1, 1], logits=rows, steps=[]), [1, 1, 1])
    rows[1, 2] = 1.0 - MIN_MARGIN / 2  # ...but at step 1, token 2 within a hair
    with pytest.raises(AssertionError, match=r"step 1: the stored 1 leads by 0\.0225"):
        assert_clear_choices(Trace(tokens=[1, 1, 1], logits=rows, steps=[]), [1, 1, 1])
    with pytest.raises(AssertionError, match="step 0: 1 chosen over the stored 3"):
        assert_clear_choices(Trace(tokens=[1, 1, 1], logits=rows, steps=[]), [3, 1, 1])
