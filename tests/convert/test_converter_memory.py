"""The converter's memory stays bounded by its largest tensor, not the model's size.

A model a few hundred MB wide (32 layers, random Q4_K_M weights written by
scripts/shaped_gguf.py, the tiny test vocabulary so that no single tensor is large) is converted
in a child process after the tiny model: what the second conversion adds to the child's peak
resident memory (VmHWM) must stay within a bound set by its largest tensor, and far below the
size of the folder it writes. Before streaming (external_data.py) the whole model was held, and
saving copied it again: the addition was more than the folder.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.convert.preflight import read_header
from scripts.shaped_gguf import Shape, write_shaped_gguf

ROOT = Path(__file__).resolve().parents[2]
# 32 layers of 11.3 M weights: a ~300 MB folder whose largest tensor pair (gate+up) is 5.8 M.
SHAPE = Shape("memory test shape", 32, 1024, 2816, 16, 4, 10000.0, 512, False)
FIXED_SLACK = 96 << 20  # allocator and interpreter noise, whatever the machine
BYTES_PER_PAIR_WEIGHT = 16  # decoded codes, scales and copies of the largest matrix pair
BYTES_PER_LAYER_WEIGHT = 4  # the layer before, alive while the next is read

CHILD = r"""
import json, sys
from pathlib import Path
from chatapp.convert.converter import convert_gguf

def peak():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024

tiny, big, out = map(Path, sys.argv[1:4])
convert_gguf(tiny, out / "tiny")  # imports and the tokenizer's libraries: the fixed part
before = peak()
convert_gguf(big, out / "big")
print(json.dumps({"before": before, "after": peak()}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_peak_memory_is_bounded_by_the_largest_tensor(tmp_path: Path, tiny_gguf: Path) -> None:
    big = tmp_path / "wide.gguf"
    write_shaped_gguf(big, SHAPE, "Q4_K_M", tokenizer_source=tiny_gguf)
    tensors = read_header(big).tensors
    pair = 2 * max(math.prod(t.shape) for t in tensors if t.name.startswith("blk."))
    layer = sum(math.prod(t.shape) for t in tensors if t.name.startswith("blk.0."))
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(tiny_gguf), str(big), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.splitlines()[-1])
    added = figures["after"] - figures["before"]
    folder = sum(p.stat().st_size for p in (tmp_path / "big").iterdir())
    bound = BYTES_PER_PAIR_WEIGHT * pair + BYTES_PER_LAYER_WEIGHT * layer + FIXED_SLACK
    assert folder > 250e6  # the model is as wide as this test means
    assert added <= bound, (added, bound)
    assert added < folder / 2, (added, folder)
