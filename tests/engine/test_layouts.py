"""All three KV layouts, every loop: same greedy tokens as the GroupQueryAttention form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.engine import Engine
from chatapp.engine.loops import IOBindingLoop
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.model_folder.model import KVLayout
from chatapp.engine.modes import MODES, Mode
from chatapp.engine.sampling import SamplingSettings
from chatapp.engine.static_window import StaticWindowKv

CONTEXT = 96
LAYOUTS = {
    "gqa": ConvertOptions(),
    "standard": ConvertOptions(attention="standard"),
    "static": ConvertOptions(kv_layout="static", attention="standard", context_length=CONTEXT),
    "static-w4": ConvertOptions(
        kv_layout="static", attention="standard", context_length=CONTEXT, window=4
    ),
}


@pytest.fixture(scope="module")
def folders(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("layouts")
    return {name: convert_gguf(tiny_gguf, root / name, opts) for name, opts in LAYOUTS.items()}


def greedy_tokens(folder: Path, mode: str, prompt: list[int], n: int) -> list[int]:
    engine = Engine(folder, mode=mode, threads=1, max_context=CONTEXT)
    settings = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)
    return engine.generate_ids(prompt, settings, ignore_eos=True).run().token_ids


def test_layouts_are_detected(folders: dict[str, Path]) -> None:
    expected = {
        "gqa": KVLayout.SHARED_BUFFER,
        "standard": KVLayout.CONCAT,
        "static": KVLayout.STATIC_WINDOW,
        "static-w4": KVLayout.STATIC_WINDOW,
    }
    for name, layout in expected.items():
        info = open_model_folder(folders[name])
        assert info.layout is layout, name
    assert open_model_folder(folders["static-w4"]).window == 4
    assert open_model_folder(folders["static"]).context_length == CONTEXT
    assert open_model_folder(folders["standard"]).has_position_ids


@pytest.mark.parametrize("prompt", [[5, 77, 130, 9, 44], list(range(3, 33))], ids=["5", "30"])
def test_every_layout_and_loop_gives_the_gqa_tokens(
    folders: dict[str, Path], prompt: list[int]
) -> None:
    reference = greedy_tokens(folders["gqa"], "naive", prompt, 24)
    assert len(reference) == 24
    for name, folder in folders.items():
        window = 4 if name == "static-w4" else 1
        # A window of 4 spends 4 slots per generated token: fewer fit in the 96 slots.
        room = (CONTEXT - len(prompt) - (-len(prompt) % window)) // window
        for mode in MODES:
            got = greedy_tokens(folder, mode, prompt, 24)
            # Without a cache the whole sequence is packed into windows again every step: it
            # needs no padded window per token, so it fits every token the context holds.
            fit = CONTEXT - len(prompt) if mode == Mode.NOCACHE else room
            assert got == reference[: min(24, fit)], (name, mode)


def test_static_window_stops_at_its_context(folders: dict[str, Path]) -> None:
    for name in ("static", "static-w4"):
        for mode in ("naive", "iobinding"):
            engine = Engine(folders[name], mode=mode, threads=1)
            settings = SamplingSettings(temperature=0.0, max_new_tokens=500)
            stats = engine.generate_ids(list(range(3, 63)), settings, ignore_eos=True).run()
            assert stats.finish_reason == "length", (name, mode)
            window = 4 if name == "static-w4" else 1
            # every slot is used: the prompt's windows, then one window per generated token
            assert 60 + (-60 % window) + window * stats.generated_tokens <= CONTEXT
            assert stats.generated_tokens >= (CONTEXT - 64) // window


def test_static_follow_up_reuses_the_cache(folders: dict[str, Path]) -> None:
    engine = Engine(folders["static"], threads=1)
    settings = SamplingSettings(temperature=0.0, max_new_tokens=5)
    first = engine.generate_ids([4, 5, 6, 7], settings, ignore_eos=True).run().token_ids
    follow = [4, 5, 6, 7, *first, 50, 51]
    warm = engine.generate_ids(follow, settings, ignore_eos=True).run()
    assert warm.reused_tokens == 4 + len(first) - 1
    engine.reset()
    assert engine.generate_ids(follow, settings, ignore_eos=True).run().token_ids == warm.token_ids


def test_static_iobinding_never_copies_kv_through_the_host(
    folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = Engine(folders["static"], mode="iobinding", threads=1)
    loop = engine.loop()
    assert isinstance(loop, IOBindingLoop) and isinstance(loop.kv, StaticWindowKv)
    bound = loop.kv.bound_values()  # the past and present buffers
    kv_values = {id(v) for v in bound.values()}
    pointers = {name: v.data_ptr() for name, v in bound.items()}
    reads: list[str] = []
    original = ort.OrtValue.numpy

    def counting_numpy(self: ort.OrtValue) -> np.ndarray:
        if id(self) in kv_values:
            reads.append("kv")
        return original(self)

    monkeypatch.setattr(ort.OrtValue, "numpy", counting_numpy)
    settings = SamplingSettings(temperature=0.0, max_new_tokens=12)
    engine.generate_ids([5, 6, 7, 8, 9], settings, ignore_eos=True).run()
    monkeypatch.undo()
    assert reads == []
    # The same device buffers stay bound: their addresses never changed.
    assert {n: v.data_ptr() for n, v in loop.kv.bound_values().items()} == pointers
    # ... and they hold the sequence: the newest slot of layer 0's present is the last token's key.
    name = engine.info.kv[0].present_name
    assert np.abs(loop.kv.present_values[name].numpy()[0, :, -1]).sum() > 0


def test_concat_iobinding_keeps_presents_on_the_device(folders: dict[str, Path]) -> None:
    engine = Engine(folders["standard"], mode="iobinding", threads=1)
    loop = engine.loop()
    settings = SamplingSettings(temperature=0.0, max_new_tokens=4)
    engine.generate_ids([5, 6, 7], settings, ignore_eos=True).run()
    past = loop.kv.bound_values()[engine.info.kv[0].past_name]
    # The bound past is the previous run's present, still an OrtValue: 3 + 3 tokens fed.
    assert past.shape() == [1, 2, 6, 16]
