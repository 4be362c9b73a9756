"""Hostile graphs among a folder's variants (the real-tool fixtures of test_tool_folders.py):
every candidate, named variant and genai-named file goes through folder_files' checks before
any graph is read, and a graph that fails them refuses the folder rather than being skipped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chatapp.engine.errors import FolderFileError, ModelError
from chatapp.engine.model_description import open_model_folder
from chatapp.engine.model_folder.variants import folder_variants

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "onnx_folders"


def copy_fixture(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / "m"))


def link_out(path: Path, tmp_path: Path) -> Path:
    """Move `path` out of the folder (beside it) and leave a link to it in its place."""
    outside = tmp_path / f"outside-{path.name}"
    shutil.move(path, outside)
    path.symlink_to(outside)
    return outside


def refused(folder: Path, onnx_file: str | None = None) -> str:
    with pytest.raises(FolderFileError) as info:
        open_model_folder(folder, onnx_file)
    message = str(info.value)
    assert "\n" not in message
    return message


def statuses(folder: Path) -> dict[str, tuple[str | None, bool, int]]:
    return {
        s.variant.path: (s.problem, s.default, s.variant.size_bytes)
        for s in folder_variants(folder)
    }


def test_an_onnx_variant_linked_outside_refuses_the_folder(tmp_path: Path) -> None:
    folder = copy_fixture("onnx-community-llama", tmp_path)
    link_out(folder / "onnx" / "model_q4.onnx", tmp_path)
    # model.onnx comes first and is fine, but every candidate is checked before any is read.
    assert "'onnx/model_q4.onnx', which leads outside the model folder" in refused(folder)
    assert "leads outside" in refused(folder, "onnx/model_q4.onnx")
    assert open_model_folder(folder, "onnx/model_fp16.onnx").onnx_file == "onnx/model_fp16.onnx"
    found = statuses(folder)
    problem, default, size = found["onnx/model_q4.onnx"]
    assert problem is not None and "leads outside" in problem
    assert (default, size) == (False, 0)  # never read, never sized
    assert found["onnx/model.onnx"][0] is None and not any(d for _, d, _ in found.values())


def test_an_onnx_variant_linked_to_a_device_is_listed_unread(tmp_path: Path) -> None:
    folder = copy_fixture("onnx-community-llama", tmp_path)
    (folder / "onnx" / "model_fp16.onnx").unlink()
    (folder / "onnx" / "model_fp16.onnx").symlink_to("/dev/zero")
    assert "leads outside" in refused(folder)
    problem, default, size = statuses(folder)["onnx/model_fp16.onnx"]
    assert problem is not None and "leads outside" in problem and (default, size) == (False, 0)


def test_a_variant_linked_inside_the_folder_opens(tmp_path: Path) -> None:
    folder = copy_fixture("onnx-community-llama", tmp_path)
    (folder / "weights").mkdir()
    shutil.move(folder / "onnx" / "model_q4.onnx", folder / "weights" / "q4.onnx")
    (folder / "onnx" / "model_q4.onnx").symlink_to(Path("..") / "weights" / "q4.onnx")
    assert open_model_folder(folder).onnx_file == "onnx/model.onnx"
    assert open_model_folder(folder, "onnx/model_q4.onnx").onnx_file == "weights/q4.onnx"
    assert statuses(folder)["onnx/model_q4.onnx"][0] is None


@pytest.mark.parametrize(
    ("filename", "message"),
    [
        ("model_int4.onnx", r"decoder filename names 'model_int4\.onnx', which is missing"),
        ("../outside.onnx", r"'\.\./outside\.onnx', which leads outside the model folder"),
        ("/etc/passwd", r"absolute path '/etc/passwd'"),
    ],
)
def test_a_genai_config_naming_a_missing_or_escaping_file_is_refused(
    tmp_path: Path, filename: str, message: str
) -> None:
    folder = copy_fixture("genai-llama-int4", tmp_path)
    shutil.copyfile(folder / "model.onnx", tmp_path / "outside.onnx")
    path = folder / "genai_config.json"
    config = json.loads(path.read_text())
    config["model"]["decoder"]["filename"] = filename
    path.write_text(json.dumps(config))
    with pytest.raises(ModelError, match=message):
        open_model_folder(folder)  # not model.onnx instead: named means meant
    [status] = folder_variants(folder)
    assert status.variant.path == "model.onnx" and status.problem is None
    assert not status.default  # the folder does not open without --onnx-file
    assert open_model_folder(folder, "model.onnx").onnx_file == "model.onnx"


@pytest.mark.parametrize("how", ["link-out", "missing"])
def test_external_data_of_the_first_graph_refuses_rather_than_falls_back(
    tmp_path: Path, how: str
) -> None:
    folder = copy_fixture("optimum-llama-external-data", tmp_path)
    (folder / "onnx").mkdir()  # a second graph that would run, tried after model.onnx
    shutil.copyfile(FIXTURES / "optimum-llama" / "model.onnx", folder / "onnx" / "model_q4.onnx")
    if how == "link-out":
        link_out(folder / "model.onnx_data", tmp_path)
    else:
        (folder / "model.onnx_data").unlink()
    expected = "leads outside" if how == "link-out" else "which is missing"
    assert expected in refused(folder)
    found = statuses(folder)
    assert expected in (found["model.onnx"][0] or "")
    assert found["onnx/model_q4.onnx"][0] is None
    assert not any(default for _, default, _ in found.values())
    assert open_model_folder(folder, "onnx/model_q4.onnx").onnx_file == "onnx/model_q4.onnx"
