"""`convert --force` replaces only chatapp's own folders, never the source GGUF; killed
conversions' leftovers are removed by the next run."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chatapp.convert.converter import ConvertOptions, convert_gguf, is_verified_copy
from chatapp.convert.errors import ConversionError
from chatapp.convert.output_folder import PARTIAL_MARKER, clean_leftovers
from chatapp.folder_format.manifest import MANIFEST_FILE

ROOT = Path(__file__).resolve().parents[2]
FORCE = ConvertOptions(overwrite=True)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): digest(p) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def src(tmp_path: Path, tiny_gguf: Path) -> Path:
    folder = tmp_path / "downloads"
    folder.mkdir()
    path = folder / "model.gguf"
    path.write_bytes(tiny_gguf.read_bytes())
    (folder / "notes.txt").write_text("my notes")
    return path


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize(
    "where", ["gguf-parent", "gguf-grandparent", "gguf-itself", "link-to-parent", "dot"]
)
def test_the_source_folder_is_never_replaced(
    tmp_path: Path, src: Path, where: str, force: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot(tmp_path)
    if where == "gguf-parent":
        out = src.parent
    elif where == "gguf-grandparent":
        out = tmp_path
    elif where == "gguf-itself":
        out = src
    elif where == "dot":
        monkeypatch.chdir(src.parent)
        out = Path(".")
    else:
        out = tmp_path / "link"
        out.symlink_to(src.parent, target_is_directory=True)
        before = snapshot(tmp_path)
    with pytest.raises(ConversionError, match=r"holds the GGUF|GGUF file itself|symbolic link"):
        convert_gguf(src, out, ConvertOptions(overwrite=force))
    assert snapshot(tmp_path) == before


def test_a_linked_source_inside_the_output_is_refused(tmp_path: Path, src: Path) -> None:
    out = convert_gguf(src, tmp_path / "out")
    inside = out / "model.gguf"
    inside.write_bytes(src.read_bytes())
    link = tmp_path / "elsewhere.gguf"
    link.symlink_to(inside)
    with pytest.raises(ConversionError, match="holds the GGUF file"):
        convert_gguf(link, out, FORCE)
    assert inside.is_file()


def test_a_hard_link_of_the_source_in_a_chatapp_folder_is_refused(
    tmp_path: Path, src: Path
) -> None:
    out = convert_gguf(src, tmp_path / "out")
    os.link(src, out / "copy.gguf")
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    manifest["files"]["copy.gguf"] = digest(src)  # even when the manifest claims it
    (out / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ConversionError, match="holds the GGUF file"):
        convert_gguf(src, out, FORCE)
    assert (out / "copy.gguf").is_file()


def test_force_refuses_a_folder_chatapp_did_not_make(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "photos"
    out.mkdir()
    (out / "holiday.jpg").write_bytes(b"\xff\xd8 not really")
    before = snapshot(out)
    with pytest.raises(ConversionError, match=r"not made by chatapp.*--force does not"):
        convert_gguf(src, out, FORCE)
    assert snapshot(out) == before


def test_force_refuses_a_forged_manifest(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / MANIFEST_FILE).write_text(json.dumps({"converter": "someone-else"}))
    (out / "data.bin").write_bytes(b"x")
    with pytest.raises(ConversionError, match="not made by chatapp"):
        convert_gguf(src, out, FORCE)
    assert (out / "data.bin").is_file()


@pytest.mark.parametrize("extra", ["file", "folder", "symlink"])
def test_force_refuses_a_chatapp_folder_holding_other_files(
    tmp_path: Path, src: Path, extra: str
) -> None:
    out = convert_gguf(src, tmp_path / "out")
    if extra == "file":
        (out / "my-notes.txt").write_text("keep me")
    elif extra == "folder":
        (out / "results").mkdir()
        (out / "results" / "run1.csv").write_text("1,2")
    else:
        (out / "config.json").unlink()
        (out / "config.json").symlink_to(tmp_path / "downloads" / "notes.txt")
    before = snapshot(out)
    with pytest.raises(ConversionError, match="chatapp did not write there"):
        convert_gguf(src, out, FORCE)
    assert snapshot(out) == before


def test_force_replaces_chatapp_folders_and_empty_ones(tmp_path: Path, src: Path) -> None:
    out = convert_gguf(src, tmp_path / "out", ConvertOptions(context_length=64))
    (out / "tokenizer.json").unlink()  # a damaged copy is still chatapp's
    convert_gguf(src, out, FORCE)
    assert is_verified_copy(out, digest(src))
    empty = tmp_path / "empty"
    empty.mkdir()
    convert_gguf(src, empty, FORCE)
    assert is_verified_copy(empty, digest(src))
    assert not (out / PARTIAL_MARKER).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["downloads", "empty", "out"]


@pytest.mark.parametrize("kind", ["a-file", "a-link-to-a-folder"])
def test_an_output_that_is_not_a_folder_is_refused(tmp_path: Path, src: Path, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "a-file":
        out.write_text("important")
    else:
        target = tmp_path / "target"
        target.mkdir()
        out.symlink_to(target, target_is_directory=True)
    with pytest.raises(ConversionError, match=r"not a folder|symbolic link"):
        convert_gguf(src, out, FORCE)
    assert out.exists()
    if kind == "a-file":
        assert out.read_text() == "important"


@pytest.mark.parametrize("kind", ["folder", "device", "missing"])
def test_the_source_must_be_a_regular_file(tmp_path: Path, kind: str) -> None:
    source = {"folder": tmp_path, "device": Path("/dev/zero"), "missing": tmp_path / "x.gguf"}[kind]
    if kind == "device" and not source.exists():
        pytest.skip("no /dev/zero here")
    with pytest.raises(ConversionError, match=r"is a folder|not a regular file|does not exist"):
        convert_gguf(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def leftover(parent: Path, name: str, marker: dict | None, manifest: bool = False) -> Path:
    folder = parent / name
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"half")
    if marker is not None:
        (folder / PARTIAL_MARKER).write_text(json.dumps(marker))
    if manifest:
        (folder / MANIFEST_FILE).write_text(json.dumps({"converter": "chatapp"}))
    return folder


def test_leftovers_of_dead_conversions_are_removed(tmp_path: Path) -> None:
    import socket

    dead = dead_pid()
    host = socket.gethostname()
    ours = {"converter": "chatapp", "pid": dead, "host": host}
    stale = [
        leftover(tmp_path, f".m.partial-{dead}-abc", ours),
        leftover(tmp_path, f".m.partial-{dead}", ours),
        leftover(tmp_path, f".m.old-{dead}-x1", None, manifest=True),
    ]
    kept = [
        leftover(tmp_path, f".m.partial-{os.getppid()}-abc", {**ours, "pid": os.getppid()}),
        leftover(tmp_path, f".m.partial-{dead}-def", None),  # not marked as ours
        leftover(tmp_path, f".m.partial-{dead}-ghi", {**ours, "host": "another-computer"}),
        leftover(tmp_path, f".m.old-{dead}-x2", None),  # no manifest
        leftover(tmp_path, f"m.partial-{dead}", ours),  # not hidden: not our name
    ]
    link = tmp_path / f".m.partial-{dead}-lnk"
    link.symlink_to(kept[0], target_is_directory=True)
    removed = clean_leftovers(tmp_path)
    assert sorted(removed) == sorted(stale)
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept) and link.is_symlink()


def test_a_killed_conversion_is_cleaned_up_by_the_next_one(tmp_path: Path, src: Path) -> None:
    out = tmp_path / "models" / "m"
    child_code = (
        "import sys, time\n"
        "from chatapp.convert.converter import convert_gguf\n"
        "def hang(fraction, message):\n"
        "    if message == 'tokenizer':\n"
        "        print('hanging', flush=True)\n"
        "        time.sleep(600)\n"
        "convert_gguf(sys.argv[1], sys.argv[2], progress=hang)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", child_code, str(src), str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "hanging"
        partials = list(out.parent.glob(".m.partial-*"))
        assert len(partials) == 1 and (partials[0] / PARTIAL_MARKER).is_file()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    time.sleep(0.05)
    convert_gguf(src, out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["m"]


# ---- conversions delete only their own folders (issue 37, cause 3) ----------------------------
def user_files(folder: Path) -> dict[str, str]:
    (folder / "photos" / "2024").mkdir(parents=True)
    (folder / "photos" / "2024" / "a.jpg").write_text("jpeg")
    (folder / "notes.txt").write_text("notes")
    return snapshot(folder)


@pytest.mark.parametrize("link", ["partial_is_link", "link_in_partial", "link_in_old_output"])
def test_user_files_behind_links_in_leftovers_survive(tmp_path: Path, link: str) -> None:
    import socket

    home = tmp_path / "home"
    home.mkdir()
    before = user_files(home)
    models = tmp_path / "models"
    models.mkdir()
    dead = dead_pid()
    ours = {"converter": "chatapp", "pid": dead, "host": socket.gethostname()}
    if link == "partial_is_link":
        (models / f".m.partial-{dead}-a").symlink_to(home, target_is_directory=True)
        (home / PARTIAL_MARKER).write_text(json.dumps(ours))  # even marked, through a link
        before = snapshot(home)
        gone: list[Path] = []
    elif link == "link_in_partial":
        partial = leftover(models, f".m.partial-{dead}-a", ours)
        (partial / "model.onnx.data").symlink_to(home, target_is_directory=True)
        gone = [partial]
    else:
        old = leftover(models, f".m.old-{dead}-a", None, manifest=True)
        (old / "tokenizer.json").symlink_to(home / "notes.txt")
        gone = [old]
    assert clean_leftovers(models) == gone
    assert snapshot(home) == before
    assert not any(p.exists() for p in gone)


@pytest.mark.parametrize("how", ["failed", "replaced"])
def test_a_conversion_into_a_linked_folder_cleans_up_there_and_nowhere_else(
    tmp_path: Path, src: Path, how: str
) -> None:
    real = tmp_path / "disk2"
    real.mkdir()
    before = user_files(real)
    (tmp_path / "models").symlink_to(real, target_is_directory=True)
    out = tmp_path / "models" / "m"
    if how == "failed":

        def fail(_fraction: float, message: str) -> None:
            if message == "tokenizer":
                raise OSError(5, "Input/output error")

        with pytest.raises(ConversionError):
            convert_gguf(src, out, progress=fail)
    else:
        convert_gguf(src, out)
        convert_gguf(src, out, FORCE)
    names = sorted(p.name for p in real.iterdir())
    assert names == (["m", "notes.txt", "photos"] if how == "replaced" else ["notes.txt", "photos"])
    assert {k: v for k, v in snapshot(real).items() if not k.startswith("m/")} == {
        k: v for k, v in before.items() if not k.startswith("m/")
    }


HANGING_CLI = """
import signal, sys, time
from chatapp.cli import main, progress  # main: the command line's function
# Ctrl+C as at a terminal, even where the suite runs in the background (nohup, `&`), which
# starts children with SIGINT ignored: the child then slept its 600 s through the SIGINT.
signal.signal(signal.SIGINT, signal.default_int_handler)
shown = progress.ProgressBar.__call__
def hang(self, fraction, message):
    if message == "tokenizer":
        print("hanging", flush=True)
        time.sleep(600)
    return shown(self, fraction, message)
progress.ProgressBar.__call__ = hang
sys.exit(main(["convert", sys.argv[1], sys.argv[2]]))
"""


@pytest.mark.parametrize(
    ("stop", "status", "said"),
    [(signal.SIGTERM, 143, "chatapp: terminated"), (signal.SIGINT, 130, "chatapp: interrupted")],
)
def test_a_stopped_convert_command_leaves_no_partial_folder(
    tmp_path: Path, src: Path, stop: signal.Signals, status: int, said: str
) -> None:
    out = tmp_path / "models" / "m"
    child = subprocess.Popen(
        [sys.executable, "-c", HANGING_CLI, str(src), str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "hanging"
        assert len(list(out.parent.glob(".m.partial-*"))) == 1
        child.send_signal(stop)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert child.returncode == status, err
    assert err.strip().endswith(said) and "Traceback" not in err
    assert list(out.parent.iterdir()) == []
