"""Opening, converting and preparing models as jobs, run without Qt (tests/session/drive.py)."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest

from chatapp.convert import converter, default_model
from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.engine import loaded_model as engine_module
from chatapp.engine import model_description, packed_cache
from chatapp.engine.engine import Engine
from chatapp.engine.errors import ModelError
from chatapp.engine.loaded_model import DevicePlan, LoadedModel
from chatapp.engine.loops import KVLoop
from chatapp.engine.model_context import ModelContext
from chatapp.engine.model_description import ModelDescription, estimate_memory, read_model_folder
from chatapp.engine.text import chat
from chatapp.session import model_jobs
from chatapp.session.model_jobs import (
    PREPARATION_CANCELLED,
    VARIANTS_CANCELLED,
    ConvertPlan,
    ConvertRequest,
    EngineHost,
    GraphRead,
    LoadRequest,
    ModelSummary,
    Progress,
    convert_job,
    load_job,
    prepare_default_model_job,
    variants_job,
)
from tests.engine.test_memory import with_external_data
from tests.session.drive import drive


def test_a_load_sets_the_engine_and_a_failed_one_keeps_it(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    host = EngineHost()
    summary: ModelSummary = drive(load_job(host, LoadRequest(tiny_model_dir, threads=1))).result
    assert summary.device == "cpu" and summary.fallback_reason is None
    assert summary.max_context == 512 and summary.folder == tiny_model_dir
    assert 0 < summary.load_seconds < 60  # how long the open took (the window remembers it)
    engine = host.engine
    missing = tmp_path / "no-such-model"
    out = drive(load_job(host, LoadRequest(missing)))
    assert out.message is not None and out.message.startswith(
        f"Could not open the model in {missing}"
    )
    assert out.message.endswith(".")
    assert host.engine is engine


def test_a_device_this_machine_lacks_falls_back_to_the_cpu(tiny_model_dir: Path) -> None:
    host = EngineHost()
    summary = drive(load_job(host, LoadRequest(tiny_model_dir, "no-such-device", 1))).result
    assert summary.device == "cpu" and summary.requested_device == "no-such-device"
    assert summary.fallback_reason is not None and "Running on the CPU" in summary.fallback_reason


def test_a_conversion_reports_progress_then_reuses_its_result(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    out_dir = tmp_path / "converted"
    first = drive(convert_job(ConvertRequest(tiny_gguf, out_dir)))
    assert first.result == out_dir and (out_dir / "model.onnx").is_file()
    # What it takes, once, before the conversion's own steps; then only progress.
    plans = [i for i, item in enumerate(first.items) if isinstance(item, ConvertPlan)]
    assert plans == [1]  # after "checking the source file"
    plan = first.items[1]
    assert plan.line.startswith("tiny-llama.gguf: the model folder takes about ")
    others = first.items[:1] + first.items[2:]
    assert all(isinstance(p, Progress) for p in others) and len(others) > 2
    again = drive(convert_job(ConvertRequest(tiny_gguf, out_dir)))
    assert again.result == out_dir
    assert [p.message for p in again.items] == ["checking the source file"]  # not converted


def test_a_conversion_ends_by_saving_the_packed_copy_its_first_load_maps(
    tiny_gguf: Path, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(packed_cache.ENV_VAR, "1")  # the tiny model is below the size it needs

    def convert_with_external_weights(_gguf: Path, out: Path, *_a: object, **_k: object) -> Path:
        return with_external_data(tiny_model_dir, out)  # as a big model's folder is written

    monkeypatch.setattr(converter, "convert_gguf", convert_with_external_weights)
    out = drive(convert_job(ConvertRequest(tiny_gguf, tmp_path / "converted")))
    assert out.result == tmp_path / "converted"
    last = out.items[-1]
    assert isinstance(last, Progress) and "packed weights" in last.message
    saved = list(packed_cache.cache_root().glob("*/*/model.onnx"))
    assert len(saved) == 1

    def no_second_save(*_args: object) -> bool:
        raise AssertionError("the first load saved the copy again")

    monkeypatch.setattr(packed_cache, "save_in_child", no_second_save)
    engine = Engine(tmp_path / "converted", threads=1, max_context=64)
    assert engine.mapped_files == (saved[0].parent / packed_cache.DATA,)


def test_the_same_gguf_under_another_folder_name_is_not_converted_again(
    tiny_gguf: Path, tmp_path: Path
) -> None:
    models = tmp_path / "models"
    first = drive(convert_job(ConvertRequest(tiny_gguf, models / "tiny-llama"))).result
    renamed = tmp_path / "tiny.llama-copy.gguf"
    renamed.write_bytes(tiny_gguf.read_bytes())  # same bytes, another name
    again = drive(convert_job(ConvertRequest(renamed, models / "tiny.llama-copy")))
    assert again.result == first
    assert [p.name for p in models.iterdir() if not p.name.startswith(".")] == ["tiny-llama"]


def test_a_stopped_conversion_is_abandoned(tiny_gguf: Path, tmp_path: Path) -> None:
    out = drive(convert_job(ConvertRequest(tiny_gguf, tmp_path / "abandoned")), stopped=True)
    assert out.aborted == "The conversion was cancelled."
    assert not (tmp_path / "abandoned").exists()  # the converter cleaned up


def test_a_bad_file_is_one_sentence(tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file")
    out = drive(convert_job(ConvertRequest(bad, tmp_path / "out")))
    assert out.message is not None and "\n" not in out.message and out.result is None


def test_preparing_the_default_model_can_be_cancelled(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setattr(default_model, "bundled_gguf", lambda: tiny_gguf)
    assert drive(prepare_default_model_job(), stopped=True).aborted == PREPARATION_CANCELLED
    prepared = drive(prepare_default_model_job())
    assert prepared.result == tmp_path / "data" / "models" / default_model.FOLDER_NAME


def test_reading_a_folders_graphs_reports_each_and_stops_between_them(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    import shutil

    folder = tmp_path / "variants"
    shutil.copytree(tiny_model_dir, folder)
    shutil.copy(folder / "model.onnx", folder / "model_fp16.onnx")
    out = drive(variants_job(folder))
    assert [v.path for v in out.result] == ["model.onnx", "model_fp16.onnx"]
    assert out.items == [GraphRead(0, 2, "model.onnx"), GraphRead(1, 2, "model_fp16.onnx")]
    assert drive(variants_job(folder), stopped=True).aborted == VARIANTS_CANCELLED
    assert drive(variants_job(tmp_path / "missing")).result == []


def test_opening_a_second_model_closes_the_first_before_loading_it(
    tiny_model_dir: Path, varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = EngineHost()
    drive(load_job(host, LoadRequest(tiny_model_dir, threads=1)))
    first = weakref.ref(host.engine)
    seen_while_opening: list[object] = []
    real_start = model_jobs.start_with_loop

    def watching(model: ModelDescription, plan: DevicePlan) -> tuple[LoadedModel, KVLoop | None]:
        seen_while_opening.append(first())  # the first engine is gone before the second loads
        return real_start(model, plan)

    monkeypatch.setattr(model_jobs, "start_with_loop", watching)
    summary = drive(load_job(host, LoadRequest(varied_model_dir, threads=1))).result
    assert summary.folder == varied_model_dir
    assert seen_while_opening == [None] and first() is None
    assert host.loaded is not None and host.loaded.model_dir == varied_model_dir


def test_a_load_that_fails_after_closing_the_first_opens_it_again(
    tiny_model_dir: Path, varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = EngineHost()
    drive(load_job(host, LoadRequest(tiny_model_dir, threads=1)))
    real_start = model_jobs.start_with_loop

    def failing_for_the_second(
        model: ModelDescription, plan: DevicePlan
    ) -> tuple[LoadedModel, KVLoop | None]:
        if model.folder == varied_model_dir:
            raise ModelError("onnxruntime cannot run model.onnx (broken).")
        return real_start(model, plan)

    monkeypatch.setattr(model_jobs, "start_with_loop", failing_for_the_second)
    out = drive(load_job(host, LoadRequest(varied_model_dir, threads=1)))
    assert out.message is not None and "broken" in out.message
    assert host.engine is not None and host.engine.info.folder == tiny_model_dir
    assert host.loaded is not None and host.loaded.model_dir == tiny_model_dir


def test_a_model_that_does_not_fit_is_refused_and_the_current_one_stays(
    tiny_model_dir: Path, varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = EngineHost()
    drive(load_job(host, LoadRequest(tiny_model_dir, threads=1)))
    engine = host.engine
    assert engine is not None
    # Free memory and what closing the current model gives back together fall 1 MB short.
    need = estimate_memory(read_model_folder(varied_model_dir), 512).total
    monkeypatch.setattr(
        model_description, "available_memory", lambda: need - host.held_bytes() - 10**6
    )
    out = drive(load_job(host, LoadRequest(varied_model_dir, threads=1)))
    assert out.message is not None and "needs about" in out.message and "are free" in out.message
    assert host.engine is engine  # refused before anything was closed


def calls_to(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[tuple[object, ...]]:
    """The arguments of each call to `owner.name` from now on (it still runs)."""
    calls: list[tuple[object, ...]] = []
    real = getattr(owner, name)

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_a_load_reads_the_folder_once_and_checks_its_memory_once(
    tiny_model_dir: Path, varied_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = EngineHost()
    drive(load_job(host, LoadRequest(tiny_model_dir, threads=1)))  # a model to replace
    reads = calls_to(monkeypatch, model_description, "read_model_folder")
    graphs = calls_to(monkeypatch, model_description, "read_onnx_graph")
    tokenizer_reads = calls_to(monkeypatch, model_description, "read_tokenizer_files")
    again = calls_to(monkeypatch, chat, "read_tokenizer_files")  # ChatTokenizer.from_folder's
    checks = calls_to(monkeypatch, engine_module, "check_memory")
    summary = drive(load_job(host, LoadRequest(varied_model_dir, threads=1))).result
    assert summary.folder == varied_model_dir
    assert [call[0] for call in reads] == [varied_model_dir]
    assert len(graphs) == 1  # the estimate reuses the graph read
    assert len(tokenizer_reads) == 1 and again == []  # the tokenizer is built from that read
    assert len(checks) == 1
    assert host.engine is not None and host.engine.model.memory == checks[0][0]


def test_a_conversion_reads_its_folder_once_to_prepare_it(
    tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    reads = calls_to(monkeypatch, model_description, "read_model_folder")
    prepared = calls_to(monkeypatch, packed_cache, "prepare_folder")
    out = drive(convert_job(ConvertRequest(tiny_gguf, tmp_path / "converted")))
    assert out.result == tmp_path / "converted"
    assert [call[0] for call in reads] == [tmp_path / "converted"]
    (model,) = (call[0] for call in prepared)
    assert isinstance(model, ModelDescription) and model.folder == tmp_path / "converted"


def test_a_load_starts_the_model_and_the_chats_context_comes_with_its_first_use(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[object] = []
    real_init = ModelContext.__init__

    def counting(self: ModelContext, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(ModelContext, "__init__", counting)
    host = EngineHost()
    host.set_speculative(True)
    summary = drive(load_job(host, LoadRequest(tiny_model_dir, threads=1))).result
    assert summary.folder == tiny_model_dir and made == []  # the load made no context
    assert host.held_bytes() > 0  # the model's memory counts before any context
    engine = host.engine  # the first job that needs the chat's engine makes its context
    assert engine is not None and len(made) == 1 and engine.context is made[0]
    assert host.engine is engine and engine.speculative  # made once, with the window's choice
    host.close_engine()
    assert host.engine is None and host.held_bytes() == 0
