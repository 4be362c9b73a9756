"""Downloads from the fake hub: resumed after a drop, a failure or a cancel (an HTTP Range from
where the part stopped), checked against the LFS sha256 before the rename, never leaving
anything the model list would take for a model."""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections import namedtuple
from pathlib import Path

import pytest

from chatapp.hub import download as download_module
from chatapp.hub.catalog import repo_files
from chatapp.hub.download import PART_SUFFIX, Download, DownloadProgress, repo_folder
from chatapp.hub.errors import DownloadCancelled, HubError
from chatapp.hub.provenance import origins_by_sha256, read_origin
from chatapp.store.model_library import list_library
from tests.hub.fake_hub import COMMIT, FakeHub, Fault, HostedRepo
from tests.tiny_model import write_tiny_gguf

REPO = "someone/Tiny-GGUF"
NAME = "tiny-Q4_1.gguf"


def _host(hub: FakeHub, data: bytes) -> HostedRepo:
    return hub.add(HostedRepo(REPO, {NAME: data}))


def _download(models: Path, progress: list[DownloadProgress] | None = None) -> Download:
    listing = repo_files(REPO)
    file = listing.find(NAME)
    assert file is not None
    return Download(
        models, REPO, listing.revision, file, progress.append if progress is not None else None
    )


def _ranges(hub: FakeHub) -> list[str | None]:
    return [r for method, path, r in hub.requests if method == "GET" and "/cdn/" in path]


def _part(models: Path) -> Path:
    (part,) = repo_folder(models, REPO).glob("*" + PART_SUFFIX)
    return part


def _nothing_looks_like_a_model(models: Path) -> None:
    assert list_library(models) == []
    assert [p.name for p in models.iterdir()] in ([], [".downloads"])


def test_a_download_is_checked_and_says_where_it_came_from(
    fake_hub: FakeHub, hub_env: Path
) -> None:
    data = os.urandom(300_000)
    _host(fake_hub, data)
    seen: list[DownloadProgress] = []
    path = _download(hub_env, seen).run()
    assert path == repo_folder(hub_env, REPO) / NAME
    assert path.read_bytes() == data
    assert not list(path.parent.glob("*" + PART_SUFFIX))
    assert seen and seen[-1].done == seen[-1].total == len(data)
    origin = read_origin(path)
    assert origin is not None
    assert (origin.repo, origin.file, origin.revision) == (REPO, NAME, COMMIT)
    assert origin.file_sha256 == hashlib.sha256(data).hexdigest()
    assert origin.endpoint == fake_hub.url
    assert origins_by_sha256(hub_env) == {origin.file_sha256: origin}
    _nothing_looks_like_a_model(hub_env)  # the GGUF waits in the hidden downloads folder
    # Asked again: already there, nothing fetched.
    before = len(_ranges(fake_hub))
    assert _download(hub_env).run() == path
    assert len(_ranges(fake_hub)) == before


def test_a_connection_dropped_mid_file_resumes_from_where_it_stopped(
    fake_hub: FakeHub, hub_env: Path
) -> None:
    data = os.urandom(400_000)
    _host(fake_hub, data)
    fake_hub.faults[NAME] = Fault(drop_after=150_000, times=1)
    path = _download(hub_env).run()
    assert path.read_bytes() == data
    ranges = _ranges(fake_hub)
    assert ranges[0] is None and ranges[-1] is not None
    assert int(ranges[-1].removeprefix("bytes=").rstrip("-")) >= 100_000  # not from the start


def test_a_lost_connection_keeps_the_part_and_the_next_try_resumes(
    fake_hub: FakeHub, hub_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download_module, "RETRY_WAIT_S", 0.01)
    data = os.urandom(400_000)
    _host(fake_hub, data)
    fake_hub.faults[NAME] = Fault(drop_after=120_000)  # every time
    with pytest.raises(HubError, match="kept; downloading again resumes") as caught:
        _download(hub_env).run()
    assert "\n" not in str(caught.value)
    assert "the connection was lost" in str(caught.value)
    part = _part(hub_env)
    assert part.stat().st_size == 120_000
    assert not (repo_folder(hub_env, REPO) / NAME).exists()
    _nothing_looks_like_a_model(hub_env)
    del fake_hub.faults[NAME]  # the network is back
    path = _download(hub_env).run()
    assert path.read_bytes() == data
    assert _ranges(fake_hub)[-1] == "bytes=120000-"


def test_cancel_keeps_the_part_and_a_later_download_resumes(
    fake_hub: FakeHub, hub_env: Path
) -> None:
    data = os.urandom(2_000_000)
    _host(fake_hub, data)
    fake_hub.chunk = 32 << 10
    fake_hub.throttle_s = 0.01
    job = _download(hub_env)
    started = threading.Event()

    def cancel_once_started(progress: DownloadProgress) -> None:
        if progress.done > 100_000:
            job.cancel()
            started.set()

    job.progress = cancel_once_started
    with pytest.raises(DownloadCancelled, match="cancelled"):
        job.run()
    assert started.is_set()
    kept = _part(hub_env).stat().st_size
    assert job.kept_bytes() == kept
    assert 0 < kept < len(data)
    _nothing_looks_like_a_model(hub_env)
    fake_hub.throttle_s = 0.0
    assert _download(hub_env).run().read_bytes() == data
    assert _ranges(fake_hub)[-1] == f"bytes={kept}-"


def test_a_part_of_another_revision_is_not_resumed(
    fake_hub: FakeHub, hub_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download_module, "RETRY_WAIT_S", 0.01)
    hosted = _host(fake_hub, os.urandom(300_000))
    fake_hub.faults[NAME] = Fault(drop_after=100_000)
    with pytest.raises(HubError, match="kept"):
        _download(hub_env).run()
    del fake_hub.faults[NAME]
    new = os.urandom(300_000)  # the file changed on the hub meanwhile
    hosted.files[NAME] = new
    path = _download(hub_env).run()
    assert path.read_bytes() == new
    assert _ranges(fake_hub)[-1] is None  # from the start, not from the old part
    assert not list(repo_folder(hub_env, REPO).glob("*" + PART_SUFFIX))  # the old part is gone


def test_a_wrong_hash_removes_the_file(fake_hub: FakeHub, hub_env: Path) -> None:
    _host(fake_hub, os.urandom(200_000))
    fake_hub.faults[NAME] = Fault(wrong_bytes=True, times=1)
    with pytest.raises(HubError, match="does not match the hub's sha256") as caught:
        _download(hub_env).run()
    assert "\n" not in str(caught.value)
    assert list(repo_folder(hub_env, REPO).iterdir()) == []
    _nothing_looks_like_a_model(hub_env)


@pytest.mark.parametrize(
    ("status", "words"), [(401, "gated"), (403, "licence"), (404, "not found"), (500, "server")]
)
def test_an_error_answer_for_the_file_is_one_line(
    fake_hub: FakeHub, hub_env: Path, status: int, words: str
) -> None:
    _host(fake_hub, os.urandom(10_000))
    job = _download(hub_env)
    fake_hub.faults[NAME] = Fault(status=status)
    with pytest.raises(HubError, match=words) as caught:
        job.run()
    assert "\n" not in str(caught.value)
    _nothing_looks_like_a_model(hub_env)


def test_a_gated_repository_needs_the_token_and_hf_token_is_sent(
    fake_hub: FakeHub, hub_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(20_000)
    fake_hub.add(HostedRepo(REPO, {NAME: data}, token="hf_test_token", gated=True))
    with pytest.raises(HubError, match="gated: accept its licence") as caught:
        repo_files(REPO)
    assert "HF_TOKEN" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setenv("HF_TOKEN", "hf_test_token")  # read at the request, not at import
    assert _download(hub_env).run().read_bytes() == data


def test_a_full_disk_is_refused_before_anything_is_fetched(
    fake_hub: FakeHub, hub_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _host(fake_hub, os.urandom(50_000))
    job = _download(hub_env)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(download_module.shutil, "disk_usage", lambda _p: usage(1, 1, 1000))
    with pytest.raises(HubError, match="free some space") as caught:
        job.run()
    assert "\n" not in str(caught.value)
    assert _ranges(fake_hub) == []


def test_a_disk_filling_up_mid_file_is_said_as_such_and_the_part_kept(
    fake_hub: FakeHub, hub_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = os.urandom(300_000)
    _host(fake_hub, data)
    real_open = download_module._open_part

    class FillsUp:
        """The part's file, on a disk with room for 100,000 bytes."""

        def __init__(self, path: Path, append: bool) -> None:
            self.inner = real_open(path, append)

        def __enter__(self) -> FillsUp:
            return self

        def __exit__(self, *exc: object) -> None:
            self.inner.close()

        def write(self, chunk: bytes) -> int:
            if self.inner.tell() + len(chunk) > 100_000:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.inner.write(chunk)

        def flush(self) -> None:
            self.inner.flush()

    monkeypatch.setattr(download_module, "_open_part", FillsUp)
    with pytest.raises(HubError, match="The disk is full while writing") as caught:
        _download(hub_env).run()
    assert "\n" not in str(caught.value) and "could not reach" not in str(caught.value)
    kept = _part(hub_env).stat().st_size
    assert 0 < kept <= 100_000
    _nothing_looks_like_a_model(hub_env)
    monkeypatch.setattr(download_module, "_open_part", real_open)  # space freed
    assert _download(hub_env).run().read_bytes() == data
    assert _ranges(fake_hub)[-1] == f"bytes={kept}-"


def test_a_link_in_place_of_the_part_is_not_followed(
    fake_hub: FakeHub, hub_env: Path, tmp_path: Path
) -> None:
    _host(fake_hub, os.urandom(10_000))
    job = _download(hub_env)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    job.folder.mkdir(parents=True)
    job.part_paths(job.file.parts[0])[1].symlink_to(victim)
    with pytest.raises(HubError, match="not a plain file"):
        job.run()
    assert victim.read_text() == "keep me"


def test_split_parts_download_and_join_into_one_checked_file(
    fake_hub: FakeHub, hub_env: Path, tmp_path: Path
) -> None:
    write_tiny_gguf(tmp_path / "tiny.gguf", split_max_tensors=6)
    parts = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    fake_hub.add(HostedRepo(REPO, {p.name: p.read_bytes() for p in parts}))
    listing = repo_files(REPO)
    (file,) = listing.files
    assert file.is_split and len(file.parts) == len(parts)
    path = Download(hub_env, REPO, listing.revision, file).run()
    assert path.name == "tiny.gguf"
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.gguf", "tiny.gguf.origin.json"]
    # Asked again, at another commit of the same bytes: nothing fetched.
    before = len(_ranges(fake_hub))
    assert Download(hub_env, REPO, "another-commit", file).run() == path
    assert len(_ranges(fake_hub)) == before
    origin = read_origin(path)
    assert origin is not None and origin.parts == [p.name for p in parts]
    assert origin.file_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


HOSTILE_ORIGINS = {
    "nested too deeply": "[" * 30_000 + "]" * 30_000,
    "a size of 1e400": '{"repo": "a/b", "file": "m.gguf", "revision": "c", "size": 1e400}',
    "hashes as one string": '{"repo": "a/b", "file": "m.gguf", "revision": "c", "size": 1, '
    '"sha256": "' + "0" * 64 + '"}',
    "a negative size": '{"repo": "a/b", "file": "m.gguf", "revision": "c", "size": -1}',
    "a list": '["a/b", "m.gguf"]',
    "a 5000-digit size": '{"repo": "a/b", "file": "m.gguf", "revision": "c", "size": '
    + "9" * 5000
    + "}",
}


def test_a_damaged_origin_is_none_and_the_others_are_still_listed(tmp_path: Path) -> None:
    """A download's `.origin.json` is the app's own file, read as input (issue 48): nested too
    deeply it raised RecursionError, a size of 1e400 OverflowError (int(inf)), from the model
    list (File > Models) and the check for a finished download."""
    from chatapp.hub.provenance import DOWNLOADS, Origin, origin_path, write_origin

    folder = tmp_path / "models" / DOWNLOADS / "a--b"
    folder.mkdir(parents=True)
    good = Origin("a/b", "good.gguf", "c" * 40, "http://hub", 1, ["ab" * 32])
    write_origin(folder / "good.gguf", good)
    for n, text in enumerate(HOSTILE_ORIGINS.values()):
        origin_path(folder / f"bad{n}.gguf").write_text(text)
        assert read_origin(folder / f"bad{n}.gguf") is None, text[:80]
    assert read_origin(folder / "good.gguf") == good
    assert origins_by_sha256(tmp_path / "models") == {"ab" * 32: good}
