"""A mapped weight file changed on disk after loading (issue 37, cause 4) stops the answer with
one line naming it, the process lives on, and the restored folder opens and answers again.

Each case runs in a child process: without the check, a read past the cut end of a mapped file
is SIGBUS, which must fail the test rather than kill pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf
from chatapp.engine.mapped_weights import MappedFiles, MappedFilesChanged
from chatapp.folder_format.native_library import usable_isa
from tests.engine.test_memory import with_external_data
from tests.tiny_model import write_tiny_gguf

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, os, shutil, sys
from pathlib import Path
from chatapp.engine.engine import Engine
from chatapp.engine.errors import EngineError
from chatapp.engine.sampling import SamplingSettings

folder, how = Path(sys.argv[1]), sys.argv[2]
data = folder / "model.onnx.data"
greedy = SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=4)

def answer(engine):
    return engine.generate_ids([3, 4, 5, 6], greedy, ignore_eos=True).run().token_ids

engine = Engine(folder, threads=1, max_context=64)
before = answer(engine)
intact = data.read_bytes()
if how == "half":
    os.truncate(data, len(intact) // 2)
elif how == "empty":
    os.truncate(data, 0)
elif how == "replaced":  # same size, another file (a sync tool's rename)
    data.unlink()
    data.write_bytes(bytes(len(intact)))
elif how == "removed":
    data.unlink()
try:
    answer(engine)
    refusal = None
except EngineError as exc:
    refusal = str(exc)
data.unlink(missing_ok=True)
data.write_bytes(intact)  # restored: opening the folder again works
del engine
after = answer(Engine(folder, threads=1, max_context=64))
print(json.dumps({"refusal": refusal, "same": before == after}))
"""


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", tied=False, seed=1)


def run_child(folder: Path, how: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder), how],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"the process died ({done.returncode}): {done.stderr[-2000:]}"
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(usable_isa() is None, reason="native kernels not built here")
@pytest.mark.parametrize("how", ["half", "empty", "replaced", "removed"])
def test_a_native_folder_whose_data_changes_refuses_in_one_line_and_reopens(
    gguf: Path, tmp_path: Path, how: str
) -> None:
    native = convert_gguf(gguf, tmp_path / "native", ConvertOptions(graph="native"))
    folder = with_external_data(native, tmp_path / "external")
    result = run_child(folder, how)
    refusal = result["refusal"]
    assert isinstance(refusal, str) and "model.onnx.data" in refusal and "\n" not in refusal
    assert "open the model again" in refusal
    assert result["same"] is True


def test_a_stock_folder_whose_data_is_cut_short_refuses_too(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    result = run_child(with_external_data(tiny_model_dir, tmp_path / "external"), "half")
    assert isinstance(result["refusal"], str) and "model.onnx.data" in result["refusal"]
    assert result["same"] is True


SERVER_CHILD = """
import json, os, sys, urllib.error, urllib.request
from pathlib import Path
from chatapp.engine.engine import Engine
from tests.serving import serving

folder = Path(sys.argv[1])
data = folder / "model.onnx.data"

def ask(url):
    body = json.dumps({"model": "m", "max_tokens": 3, "temperature": 0,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(url + "/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.load(answer)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)

with serving(Engine(folder, threads=1)) as served:
    first = ask(served.url)
    os.truncate(data, data.stat().st_size // 2)
    second, third = ask(served.url), ask(served.url)
print(json.dumps({"first": first[0], "second": second, "third": third[0]}))
"""


@pytest.mark.skipif(usable_isa() is None, reason="native kernels not built here")
def test_the_server_answers_a_clean_error_and_stays_up(gguf: Path, tmp_path: Path) -> None:
    native = convert_gguf(gguf, tmp_path / "native", ConvertOptions(graph="native"))
    folder = with_external_data(native, tmp_path / "external")
    done = subprocess.run(
        [sys.executable, "-c", SERVER_CHILD, str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"the server died ({done.returncode}): {done.stderr[-2000:]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["first"] == 200
    status, body = result["second"]
    assert status >= 400 and "model.onnx.data" in body["error"]["message"]
    assert "\n" not in body["error"]["message"]
    assert result["third"] >= 400  # still up, still refusing until the model is opened again


def test_an_untouched_file_passes_and_a_touched_one_does_not(tmp_path: Path) -> None:
    weights = tmp_path / "w.data"
    weights.write_bytes(b"1234")
    files = MappedFiles([weights], "Tiny")
    files.check()
    files.check()
    os.utime(weights, ns=(0, 0))  # same size, same inode, another modification time
    with pytest.raises(MappedFilesChanged, match=r"w\.data of Tiny changed on disk"):
        files.check()
