"""A device that computes only short runs right (WebGPU's attention past 31 tokens, devices.py):
every loop, the no-cache one included, runs a longer sequence in pieces and gives the logits
and tokens of one whole run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from chatapp.engine.devices import CPU, WEBGPU_MAX_RUN_ROWS
from chatapp.engine.engine import Engine
from chatapp.engine.loop_factory import make_loop
from chatapp.engine.loops import KVLoop
from chatapp.engine.modes import MODES
from tests.engine.test_logits_rows import CONTEXT, folders  # noqa: F401  (a fixture)

SHORT_RUNS = dataclasses.replace(CPU, max_run_rows=8)
PROMPT = [(13 * i + 7) % 250 + 3 for i in range(27)]  # 8 + 8 + 8 + 3


def greedy(loop: KVLoop, n: int) -> tuple[list[int], np.ndarray]:
    loop.prepare(PROMPT)
    rows = [loop.forward(PROMPT).logits.copy()]
    tokens: list[int] = []
    for _ in range(n):
        tokens.append(int(rows[-1].argmax()))
        rows.append(loop.forward([tokens[-1]]).logits.copy())
    return tokens, np.array(rows)


@pytest.mark.parametrize("kind", ["gqa", "standard", "genai-int4", "optimum"])
@pytest.mark.parametrize("mode", MODES)
def test_short_runs_give_the_logits_of_one_run(
    folders: dict[str, Path],  # noqa: F811
    kind: str,
    mode: str,
) -> None:
    engine = Engine(folders[kind], mode=mode, threads=1, max_context=CONTEXT)
    whole = greedy(engine.loop(), 6)
    limited = Engine(folders[kind], mode=mode, threads=1, max_context=CONTEXT).loop()
    calls = 0
    run = limited.session.run

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return run(*args, **kwargs)  # type: ignore[arg-type]

    limited.device = limited.kv.device = SHORT_RUNS  # the loop's and its KV strategy's
    limited.prefill_chunk = 8  # what a loop made on such a device sets itself
    limited.session.run = counted  # type: ignore[method-assign]
    tokens, logits = greedy(limited, 6)
    assert tokens == whole[0]
    # Without a cache a piece of one token takes the step kernel (int8 levels), the whole run
    # the prompt kernel: they agree to what the cached loops' steps and prompts do.
    tolerance = 5e-3 if mode == "nocache" else 1e-4
    np.testing.assert_allclose(logits, whole[1], rtol=1e-3, atol=tolerance)
    if mode in ("naive", "nocache"):  # IO-Binding runs through run_with_iobinding
        assert calls > 1 + 6  # the prompt took several runs (and, without a cache, each step)


def test_loops_on_a_short_run_device_cut_their_prompt_pieces(
    folders: dict[str, Path],  # noqa: F811
) -> None:
    engine = Engine(folders["gqa"], threads=1, max_context=CONTEXT)
    loop = make_loop(engine.mode, engine.session, engine.info, SHORT_RUNS, CONTEXT)
    assert loop.prefill_chunk == 8
    assert WEBGPU_MAX_RUN_ROWS < 32  # the length where WebGPU's other attention kernel starts
