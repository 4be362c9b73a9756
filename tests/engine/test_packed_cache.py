"""Packed weights saved once and mapped: the same tokens, the copy reused, made only when asked."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import onnx
import pytest

from chatapp.datadir import ENV_VAR as DATA_DIR_ENV
from chatapp.engine import packed_cache
from chatapp.engine.engine import Engine
from chatapp.engine.model_description import read_model
from chatapp.engine.packed_cache import ENV_VAR, cache_root, prepare_folder, resident_need
from chatapp.engine.sampling import SamplingSettings
from chatapp.safe_delete import OWNED_MARKER, mark_owned
from tests.engine.test_memory import with_external_data

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def greedy(n: int) -> SamplingSettings:
    return SamplingSettings(temperature=0.0, repetition_penalty=1.0, max_new_tokens=n)


def answers(engine: Engine) -> list[list[int]]:
    """Both loops, two turns each (the second reuses the first's cache)."""
    out = []
    for mode in ("naive", "iobinding"):
        engine.loop(mode).reset()
        first = engine.generate_ids(list(range(3, 40)), greedy(16), mode, ignore_eos=True)
        ids = first.run().token_ids
        turn = list(range(3, 40)) + ids + [7, 8, 9]
        out.append(
            ids + engine.generate_ids(turn, greedy(16), mode, ignore_eos=True).run().token_ids
        )
    return out


def test_a_packed_copy_gives_the_same_tokens_and_is_made_once(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "0")
    plain = Engine(folder, threads=1, max_context=128)
    assert plain.mapped_files == plain.memory.mapped_files
    reference = answers(plain)
    assert reference[0] == reference[1]  # both loops agree
    monkeypatch.setenv(ENV_VAR, "1")  # the tiny model is far below the size it is made for
    packed = Engine(folder, threads=1, max_context=128)
    assert packed.mapped_files != packed.memory.mapped_files
    assert packed.mapped_files[0].is_relative_to(cache_root())
    assert answers(packed) == reference

    def no_second_save(*_args: object) -> None:
        raise AssertionError("the packed copy was made again")

    monkeypatch.setattr(packed_cache, "_save", no_second_save)
    again = Engine(folder, threads=1, max_context=128)
    assert again.mapped_files == packed.mapped_files
    assert answers(again) == reference


def test_a_model_without_external_weights_runs_from_its_own_graph(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    engine = Engine(tiny_model_dir, threads=1, max_context=64)
    assert engine.mapped_files == ()
    assert not cache_root().exists()


# A child that starts writing the copy and then dies (killed by the system, a full disk).
DYING_CHILD = """
import os, pathlib, sys, time
graph = pathlib.Path(sys.argv[1])
source = pathlib.Path(os.environ["CHATAPP_TEST_SOURCE_FOLDER"])
source.mkdir(parents=True)  # as the real child: each folder marked as it is made
(source / ".chatapp-owned").write_text("made by chatapp")
work = source / f".writing-{os.getpid()}-x"
work.mkdir()
(work / ".chatapp-owned").write_text("made by chatapp")
(work / "model.onnx.data").write_bytes(b"half")
if os.environ.get("CHATAPP_TEST_HANG"):
    time.sleep(60)
os._exit(9)
"""


def dying_child(
    tmp_path: Path, folder: Path, monkeypatch: pytest.MonkeyPatch, hang: bool = False
) -> None:
    script = tmp_path / "dying_child.py"
    script.write_text(DYING_CHILD)
    source = cache_root() / packed_cache._source_key(folder / "model.onnx")
    monkeypatch.setenv("CHATAPP_TEST_SOURCE_FOLDER", str(source))
    if hang:
        monkeypatch.setenv("CHATAPP_TEST_HANG", "1")
    monkeypatch.setattr(packed_cache, "_child_command", lambda: [sys.executable, str(script)])


def test_a_failed_save_falls_back_to_packing_on_the_heap(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    dying_child(tmp_path, folder, monkeypatch)
    engine = Engine(folder, threads=1, max_context=64)
    assert engine.mapped_files == engine.memory.mapped_files
    left = [p.name for p in cache_root().rglob("*") if p.is_file()]
    assert left == [OWNED_MARKER]  # nothing half-written: the graph's folder of copies, empty


def test_a_stopped_save_leaves_nothing_and_the_next_one_completes(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    with monkeypatch.context() as patched:
        dying_child(tmp_path, folder, patched, hang=True)
        source = cache_root() / packed_cache._source_key(folder / "model.onnx")
        started = time.monotonic()

        def stop_once_writing() -> bool:
            return any(source.glob(".writing-*")) or time.monotonic() - started > 30

        assert prepare_folder(read_model(folder), threads=1, should_stop=stop_once_writing) is None
        assert time.monotonic() - started < 30  # stopped, not waited for
        assert [p.name for p in cache_root().rglob("*") if p.is_file()] == [OWNED_MARKER]
    # a copy abandoned by a writer that is gone is removed by the next save; a folder of the
    # same name without the app's marker is not the app's to delete
    abandoned, unmarked = source / ".writing-999999999-x", source / ".writing-999999998-y"
    abandoned.mkdir()
    mark_owned(abandoned)
    unmarked.mkdir()
    (unmarked / "model.onnx.data").write_text("someone's")
    graph = prepare_folder(read_model(folder), threads=1)
    assert graph is not None and graph.is_file()
    assert not abandoned.exists()
    assert (unmarked / "model.onnx.data").read_text() == "someone's"
    engine = Engine(folder, threads=1, max_context=64)
    assert engine.mapped_files == (graph.parent / packed_cache.DATA,)


def test_a_conversion_prepares_nothing_for_a_small_model_or_when_turned_off(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert prepare_folder(read_model(folder)) is None  # far below the size a copy is made for
    monkeypatch.setenv(ENV_VAR, "0")
    assert prepare_folder(read_model(folder)) is None
    assert not cache_root().exists()


def test_once_the_copy_is_saved_the_estimate_counts_one_kernels_copies(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    model = read_model(folder, max_context=64)
    estimate = model.memory
    assert resident_need(model) == estimate  # the first load packs both
    engine = Engine(folder, threads=1, max_context=64)
    one = resident_need(model)
    assert one.packed == estimate.packed_one_kernel < estimate.packed
    assert engine.resident_estimate == one
    on_device = read_model(folder, device="webgpu", max_context=64)
    assert resident_need(on_device) == on_device.memory  # other devices: their own copy


def test_the_copies_of_a_removed_model_go_when_another_is_made(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    first = with_external_data(tiny_model_dir, tmp_path / "first")
    Engine(first, threads=1, max_context=64)
    assert len(list(cache_root().iterdir())) == 1
    shutil.rmtree(first)  # the model is removed from the library
    older = cache_root() / "0123456789abcdef"  # a folder of copies that names no graph
    older.mkdir(parents=True)
    mark_owned(older)
    unmarked = cache_root() / "00000000deadbeef"  # the cache's shape, but not marked: not ours
    (unmarked / "fedcba9876543210").mkdir(parents=True)
    (unmarked / "fedcba9876543210" / "model.onnx").write_text("someone's")
    second_graph = with_external_data(tiny_model_dir, tmp_path / "second") / "model.onnx"
    Engine(second_graph.parent, threads=1, max_context=64)
    sources = [p.read_text() for p in cache_root().glob("*/source.txt")]
    assert sources == [str((tmp_path / "second" / "model.onnx").resolve())]
    names = sorted(p.name for p in cache_root().iterdir())
    assert names == sorted([packed_cache._source_key(second_graph), unmarked.name])


# ---- the cache never deletes what it did not make (issue 37, cause 3) --------------------------
def user_files(folder: Path) -> dict[str, str]:
    """Folders of someone's files, one named and filled as the cache's own would be."""
    (folder / "photos" / "2024").mkdir(parents=True)
    (folder / "photos" / "2024" / "a.jpg").write_text("jpeg")
    (folder / "0123456789abcdef").mkdir()
    (folder / "0123456789abcdef" / "source.txt").write_text("/nowhere/model.onnx")
    (folder / "notes.txt").write_text("notes")
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("link", ["cache_root", "copies_folder", "stale_copy", "inside_a_copy"])
def test_user_files_behind_a_link_in_the_cache_survive_a_save(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, link: str
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    home = tmp_path / "home"
    home.mkdir()
    before = user_files(home)
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    source = cache_root() / packed_cache._source_key(folder / "model.onnx")
    if link == "cache_root":  # the case: cache/packed links to a folder of folders
        cache_root().parent.mkdir(parents=True)
        cache_root().symlink_to(home, target_is_directory=True)
    elif link == "copies_folder":  # a folder of copies that names no graph, as a link
        cache_root().mkdir(parents=True)
        (cache_root() / "fedcba9876543210").symlink_to(home, target_is_directory=True)
    elif link == "stale_copy":  # an older copy of this very graph, as a link
        source.mkdir(parents=True)
        mark_owned(source)  # the graph's folder of copies is the cache's own
        (source / "fedcba9876543210").symlink_to(home, target_is_directory=True)
    else:  # a stale copy of ours holding a link to the user's folder
        stale = source / "fedcba9876543210"
        stale.mkdir(parents=True)
        mark_owned(source)
        mark_owned(stale)
        (stale / "model.onnx").symlink_to(home, target_is_directory=True)
    engine = Engine(folder, threads=1, max_context=64)
    assert engine.generate_ids([3, 4, 5], greedy(2), ignore_eos=True).run().token_ids
    after = {str(p.relative_to(home)): p.read_text() for p in home.rglob("*") if p.is_file()}
    assert after == before
    if link == "cache_root":  # nothing is written through the link either: packed on the heap
        assert engine.mapped_files == engine.memory.mapped_files
    else:
        assert engine.mapped_files != engine.memory.mapped_files


def test_a_damaged_copy_is_saved_again_and_the_load_says_so(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    first = Engine(folder, threads=1, max_context=64)
    copy_graph = first.mapped_files[0].parent / packed_cache.GRAPH
    reference = answers(first)
    del first
    copy_graph.write_bytes(b"not a graph")  # a disk error, a sync tool
    engine = Engine(folder, threads=1, max_context=64)
    assert engine.fallback_reason is not None and "saved again" in engine.fallback_reason
    assert engine.mapped_files != engine.memory.mapped_files  # from the new copy
    assert answers(engine) == reference


def test_a_copy_that_cannot_be_saved_again_leaves_the_folders_graph(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    copy_data = Engine(folder, threads=1, max_context=64).mapped_files[0]
    copy_data.write_bytes(copy_data.read_bytes()[:100])  # the copy's weights cut short
    dying_child(tmp_path, folder, monkeypatch)
    engine = Engine(folder, threads=1, max_context=64)
    assert engine.fallback_reason is not None and "own graph" in engine.fallback_reason
    assert engine.mapped_files == engine.memory.mapped_files
    assert engine.generate_ids([3, 4, 5], greedy(2), ignore_eos=True).run().token_ids


@pytest.mark.parametrize("how", ["no_room", "crash"])
def test_a_failed_save_is_logged_in_one_line_with_its_reason(
    tiny_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    script = tmp_path / "child.py"
    if how == "no_room":  # the real child, with a disk that has no room
        script.write_text(
            "import shutil, sys, collections\n"
            "from chatapp.engine import packed_cache\n"
            "usage = collections.namedtuple('usage', 'total used free')\n"
            "shutil.disk_usage = lambda _p: usage(1, 1, 0)\n"
            "sys.exit(packed_cache._child_entry(sys.argv[1:]))\n"
        )
        expected = "too little room"
    else:  # a child that dies with a traceback
        script.write_text("raise RuntimeError('the disk went away')\n")
        expected = "RuntimeError: the disk went away"
    monkeypatch.setattr(packed_cache, "_child_command", lambda: [sys.executable, str(script)])
    with caplog.at_level("WARNING", logger=packed_cache.__name__):
        assert not packed_cache.save_in_child(folder / "model.onnx", 1)
    (record,) = [r for r in caplog.records if "not saved" in r.getMessage()]
    assert expected in record.getMessage()
    assert "\n" not in record.getMessage() and "Traceback" not in record.getMessage()


# ---- nothing written or deleted without the app's marker (issue 48, cause 5) -----------------
def tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): p.read_text() if p.is_file() else "<dir>"
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize(
    "planted", ["cache is a link", "the graph's folder is the user's", "a user folder in the cache"]
)
def test_nothing_is_written_or_deleted_without_the_marker(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    home = tmp_path / "home"
    user_files(home)
    (home / "0123456789abcdef" / "model.onnx").write_text("the user's model")  # the cache's shape
    folder = with_external_data(tiny_model_dir, tmp_path / "external")
    source = cache_root() / packed_cache._source_key(folder / "model.onnx")
    if planted == "cache is a link":  # $DATA/cache, above cache/packed, links to the user's
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "cache").symlink_to(home, target_is_directory=True)
        watched = home
    elif planted == "the graph's folder is the user's":  # a folder there before the cache
        source.parent.mkdir(parents=True)
        shutil.copytree(home, source)
        watched = source
    else:  # a folder the cache did not make, with a name and files like its own
        cache_root().mkdir(parents=True)
        shutil.copytree(home / "0123456789abcdef", cache_root() / "0123456789abcdef")
        watched = cache_root() / "0123456789abcdef"
    before = tree(watched)
    engine = Engine(folder, threads=1, max_context=64)
    assert engine.generate_ids([3, 4, 5], greedy(2), ignore_eos=True).run().token_ids
    assert tree(watched) == before  # no copy, no marker, nothing deleted
    assert not list(home.rglob(OWNED_MARKER))
    if planted == "a user folder in the cache":  # the cache's own folders beside it still work
        assert engine.mapped_files != engine.memory.mapped_files
    else:  # packed on the heap, as before the cache
        assert engine.mapped_files == engine.memory.mapped_files


def test_a_marker_is_written_only_into_a_folder_just_made(tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    mark_owned(made)
    with pytest.raises(FileExistsError):  # marked twice: it was not just made
        mark_owned(made)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "users", target_is_directory=True)
    (tmp_path / "users").mkdir()
    with pytest.raises(OSError):
        mark_owned(link)
    assert not (tmp_path / "users" / OWNED_MARKER).exists()


def onnx_community_layout(folder: Path, out: Path) -> Path:
    """A copy of `folder` laid out as onnx-community's: the graph and its external weights in
    `onnx/` (`model.onnx` + `model.onnx_data`), the tokenizer and configs above."""
    shutil.copytree(folder, out)
    (out / "onnx").mkdir()
    proto = onnx.load(str(out / "model.onnx"))
    onnx.save_model(
        proto,
        str(out / "onnx" / "model.onnx"),
        save_as_external_data=True,
        location="model.onnx_data",
        size_threshold=4096,
    )
    (out / "model.onnx").unlink()
    (out / "genai_config.json").unlink(missing_ok=True)  # onnx-community ships none
    return out


def test_the_packed_copy_is_saved_for_the_onnx_community_layout(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    folder = onnx_community_layout(tiny_model_dir, tmp_path / "community")
    reference = Engine(with_external_data(tiny_model_dir, tmp_path / "flat"), threads=1)
    packed_cache_off = reference.generate_ids([3, 4, 5], greedy(8), ignore_eos=True).run()
    engine = Engine(folder, threads=1, max_context=64)
    (data,) = engine.mapped_files
    assert data.name == packed_cache.DATA and data.is_relative_to(cache_root())
    answer = engine.generate_ids([3, 4, 5], greedy(8), ignore_eos=True).run()
    assert answer.token_ids == packed_cache_off.token_ids
    model = read_model(folder)
    assert prepare_folder(model, threads=1) == data.parent / packed_cache.GRAPH  # saved once


@pytest.mark.parametrize(
    "source", [b"\xff\xfe/not/utf-8/model.onnx", b"/a/path/with/a/\0/model.onnx"]
)
def test_a_damaged_source_name_costs_only_its_own_folder_not_the_cache(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: bytes
) -> None:
    """The cache is the app's own file too (issue 48): a source.txt that is not UTF-8 raised
    UnicodeDecodeError while old copies were cleared, so no model got a packed copy again."""
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(ENV_VAR, "1")
    damaged = cache_root() / "0123456789abcdef"
    damaged.mkdir(parents=True)
    mark_owned(damaged)
    (damaged / packed_cache.SOURCE).write_bytes(source)
    engine = Engine(with_external_data(tiny_model_dir, tmp_path / "m"), threads=1, max_context=64)
    assert engine.mapped_files != engine.memory.mapped_files  # runs from its packed copy
    assert not damaged.exists()  # the cache's own, naming no graph: cleared as such
