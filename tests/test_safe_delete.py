"""The one way chatapp deletes folders (chatapp/safe_delete.py): only folders it made, never
through a symbolic link, links inside removed as links; a folder of user files behind every
kind of link survives."""

from __future__ import annotations

from pathlib import Path

import pytest

from chatapp import safe_delete
from chatapp.safe_delete import (
    linked_between,
    mark_owned,
    marked_owned,
    remove_owned,
    replacing,
    write_replacing,
)


def user_files(folder: Path) -> dict[str, str]:
    """A folder of someone's files, with folders inside (what an `rmtree` through a link
    would take); returns what must still be there afterwards."""
    (folder / "photos" / "2024").mkdir(parents=True)
    (folder / "photos" / "2024" / "a.jpg").write_text("jpeg")
    (folder / "0123456789abcdef").mkdir()  # named as the cache names its folders
    (folder / "0123456789abcdef" / "source.txt").write_text("mine")
    (folder / "notes.txt").write_text("notes")
    return contents(folder)


def contents(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def mine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    folder = tmp_path / "home"
    folder.mkdir()
    return folder, user_files(folder)


def owned_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    mark_owned(path)
    (path / "model.onnx.data").write_bytes(b"weights")
    return path


@pytest.mark.parametrize("layout", ["root_link", "entry_link", "unmarked", "outside", "dotdot"])
def test_nothing_but_a_marked_folder_reached_without_links_is_deleted(
    tmp_path: Path, mine: tuple[Path, dict[str, str]], layout: str
) -> None:
    home, before = mine
    root = tmp_path / "cache"
    if layout == "root_link":  # the place cleaned is itself a link to the user's folder
        root.symlink_to(home, target_is_directory=True)
        target = root / "photos"
        mark_owned(home / "photos")  # even a marker there does not make it ours through a link
        before = contents(home)
    elif layout == "entry_link":
        root.mkdir()
        target = root / "entry"
        target.symlink_to(home, target_is_directory=True)
    elif layout == "unmarked":
        root.symlink_to(home, target_is_directory=True)
        root = home  # reached without a link, but not marked
        target = home / "photos"
    elif layout == "outside":
        root.mkdir()
        target = home
    else:
        root.mkdir()
        target = root / ".." / "home"
    assert not remove_owned(target, root)
    assert contents(home) == before


def test_links_inside_a_folder_of_ours_go_as_links(
    tmp_path: Path, mine: tuple[Path, dict[str, str]]
) -> None:
    home, before = mine
    root = tmp_path / "cache"
    ours = owned_folder(root / "copy")
    (ours / "to_folder").symlink_to(home, target_is_directory=True)
    (ours / "to_file").symlink_to(home / "notes.txt")
    (ours / "deeper").mkdir()
    (ours / "deeper" / "again").symlink_to(home / "photos", target_is_directory=True)
    assert remove_owned(ours, root)
    assert not ours.exists()
    assert contents(home) == before


def test_a_marker_that_is_a_link_is_no_marker(tmp_path: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    real = tmp_path / "real-marker"
    real.write_text("x")
    (folder / ".chatapp-owned").symlink_to(real)
    assert not marked_owned(folder)
    assert not remove_owned(folder, tmp_path)
    assert folder.is_dir()


def test_linked_between_names_the_first_link(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a", target_is_directory=True)
    assert linked_between(tmp_path, tmp_path / "a" / "b") is None
    assert linked_between(tmp_path, tmp_path / "link" / "b") == tmp_path / "link"
    assert linked_between(tmp_path / "a", tmp_path / "elsewhere") == tmp_path / "elsewhere"


def test_replacing_writes_over_a_link_not_through_it_and_leaves_nothing_on_failure(
    tmp_path: Path, mine: tuple[Path, dict[str, str]]
) -> None:
    home, before = mine
    target = tmp_path / "result.json"
    target.symlink_to(home / "notes.txt")
    with replacing(target) as fh:
        fh.write("{}")
    assert target.read_text() == "{}" and not target.is_symlink()
    plain = tmp_path / "plain.txt"
    plain.write_text("")
    assert target.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777  # not mkstemp's 0600
    plain.unlink()
    with pytest.raises(RuntimeError), replacing(target) as fh:
        fh.write("half")
        raise RuntimeError("the disk went away")
    assert target.read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "result.json"]
    assert contents(home) == before


@pytest.mark.parametrize("data", ["text é\n", b"\x00bytes\xff"])
def test_write_replacing_writes_whole_files_over_links_not_through_them(
    tmp_path: Path, data: str | bytes
) -> None:
    users = tmp_path / "users.txt"
    users.write_text("mine", encoding="utf-8")
    target = tmp_path / "state.json"
    target.symlink_to(users)
    write_replacing(target, data)
    assert users.read_text(encoding="utf-8") == "mine"
    assert not target.is_symlink()
    written = target.read_bytes()
    assert written == (data.encode("utf-8") if isinstance(data, str) else data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json", "users.txt"]


@pytest.mark.parametrize("planted", ["link to a file", "dangling link", "file"])
def test_a_name_planted_at_the_temporary_name_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    users = tmp_path / "users.txt"
    users.write_text("mine", encoding="utf-8")
    monkeypatch.setattr(safe_delete.secrets, "token_hex", lambda _n: "feedfacecafe")
    temporary = tmp_path / ".state.json.feedfacecafe.writing"
    if planted == "file":
        temporary.write_text("someone's", encoding="utf-8")
    else:
        temporary.symlink_to(users if planted == "link to a file" else tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        write_replacing(tmp_path / "state.json", "new")
    assert users.read_text(encoding="utf-8") == "mine"
    assert not (tmp_path / "nowhere").exists() and not (tmp_path / "state.json").exists()
