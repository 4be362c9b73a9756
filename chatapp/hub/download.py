"""Download a hub file into the models folder: resumable, checked, never half a model.

Where: `<models>/.downloads/<owner>--<name>/`, a hidden folder the model list ignores. Each part
is written to `<file>.part` (created exclusively, never through a link) and grows there across
tries: a crash, a cancel or a lost connection leaves it for the next try, which asks the hub
for the rest (an HTTP Range) at exactly the commit the listing was of. Only when the part has
the hub's size and its sha256 equals the hub's LFS object id is it renamed to `<file>`; a
wrong hash removes it. A split GGUF's parts are then joined into one file (split.py). Beside
the file, `<file>.origin.json` says where it came from (provenance.py).
"""

from __future__ import annotations

import errno
import glob
import hashlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from chatapp.error_text import first_line
from chatapp.hub.catalog import FilePart, HubFile
from chatapp.hub.errors import DownloadCancelled, HubError, endpoint, hub_error
from chatapp.hub.provenance import DOWNLOADS, Origin, read_origin, write_origin
from chatapp.units import fmt_bytes

PART_SUFFIX = ".part"
CHECKED_SUFFIX = ".checked"  # a split's part, complete and checked, waiting for the others
CHUNK = 1 << 20
# A connection lost mid-file is tried again this many times (each time from where it stopped).
RETRIES = 3
RETRY_WAIT_S = 1.0
REPORT_EVERY_S = 0.25
DISK_MARGIN = 64 << 20  # room left for everything else on the disk


@dataclass(frozen=True)
class DownloadProgress:
    done: int  # bytes on disk of the whole file (all parts)
    total: int
    rate: float  # bytes per second over this session's transfer
    part: str  # the part being fetched

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 0.0

    @property
    def seconds_left(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate > 0 else None

    def line(self) -> str:
        left = self.seconds_left
        eta = f", {_duration(left)} left" if left is not None else ""
        rate = f", {fmt_bytes(self.rate)}/s" if self.rate > 0 else ""
        return f"{fmt_bytes(self.done)} of {fmt_bytes(self.total)}{rate}{eta}"


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    if seconds >= 60:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds} s"


def repo_folder(models: Path, repo: str) -> Path:
    """`<models>/.downloads/<owner>--<name>`: one plain folder name, whatever the repo says."""
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in repo.replace("/", "--"))
    return models / DOWNLOADS / safe.strip(".-")


def downloaded_file(models: Path, repo: str, file: HubFile, revision: str) -> Path | None:
    """The finished download of `file`, if it is there: its origin names the same hashes (the
    same bytes, at whatever commit), or for a file the hub gives no hash of, this revision."""
    path = repo_folder(models, repo) / file.local_name
    origin = read_origin(path)
    if origin is None or not path.is_file() or path.is_symlink():
        return None
    hashes = [p.sha256 or "" for p in file.parts]
    same = origin.sha256 == hashes if all(hashes) else origin.revision == revision
    return path if same and origin.size == path.stat().st_size else None


class Download:
    """One file of a repository at a revision, into `models`; `run` blocks (call it off the GUI
    thread) and `cancel` (any thread) stops it after the current chunk."""

    def __init__(
        self,
        models: Path,
        repo: str,
        revision: str,
        file: HubFile,
        progress: Callable[[DownloadProgress], None] | None = None,
    ) -> None:
        self.models = models
        self.repo = repo
        self.revision = revision
        self.file = file
        self.progress = progress or (lambda _p: None)
        self.cancelled = threading.Event()
        self.folder = repo_folder(models, repo)
        self.target = self.folder / file.local_name
        self._started = time.monotonic()
        self._moved = 0  # bytes received in this run (the rate)

    def cancel(self) -> None:
        self.cancelled.set()

    def run(self) -> Path:
        done = downloaded_file(self.models, self.repo, self.file, self.revision)
        if done is not None:
            return done
        if self.file.not_a_model:
            raise HubError(f"{self.file.name} is {self.file.not_a_model}.")
        if self.file.size is None:
            raise HubError(f"The hub does not say how large {self.file.name} is; not downloaded.")
        self.folder.mkdir(parents=True, exist_ok=True)
        self._check_disk()
        self._started = time.monotonic()
        finished = [self._fetch_part(part) for part in self.file.parts]
        if self.file.is_split:
            from chatapp.hub.split import join_parts

            file_sha256 = join_parts(finished, self.target)
            for path in finished:
                path.unlink(missing_ok=True)
        else:
            file_sha256 = self.file.parts[0].sha256 or sha256_of(self.target) or ""
        write_origin(
            self.target,
            Origin(
                repo=self.repo,
                file=self.file.name,
                revision=self.revision,
                endpoint=endpoint(),
                size=self.target.stat().st_size,
                sha256=[p.sha256 or "" for p in self.file.parts],
                parts=[p.name for p in self.file.parts],
                file_sha256=file_sha256.lower(),
            ),
        )
        return self.target

    # ---- what it takes --------------------------------------------------------------------
    def part_paths(self, part: FilePart) -> tuple[Path, Path]:
        """(where the part goes once checked, where it grows). The expected hash is in both
        names: bytes of another revision's file at the same path are never resumed into this
        one, nor a checked part of another revision joined with this one's."""
        name = Path(part.name).name
        tag = f".{part.sha256[:12]}" if part.sha256 else ""
        final = self.folder / f"{name}{tag}{CHECKED_SUFFIX}" if self.file.is_split else self.target
        return final, self.folder / f"{name}{tag}{PART_SUFFIX}"

    def _on_disk(self) -> int:
        """Bytes of this file already here: the parts growing, and a split's parts that are
        complete and checked (a single file's final name may hold another revision)."""
        have = 0
        for part in self.file.parts:
            final, partial = self.part_paths(part)
            places = (partial, final) if self.file.is_split else (partial,)
            for path in places:
                if path.is_file() and not path.is_symlink():
                    have += path.stat().st_size
                    break
        return have

    def kept_bytes(self) -> int:
        """What a download of this file started before left to resume from (0: none)."""
        return 0 if self.file.size is None else min(self._on_disk(), self.file.size)

    def _check_disk(self) -> None:
        total = self.file.size or 0
        need = total - self._on_disk() + (total if self.file.is_split else 0)  # the joined copy
        free = shutil.disk_usage(self.folder).free
        if need + DISK_MARGIN > free:
            raise HubError(
                f"{self.file.local_name} needs {fmt_bytes(need)} more on the disk and "
                f"{fmt_bytes(free)} are free in {self.folder}; free some space first."
            )

    # ---- one part -----------------------------------------------------------------------
    def _fetch_part(self, part: FilePart) -> Path:
        final, partial = self.part_paths(part)
        if self.file.is_split and final.is_file() and not final.is_symlink():
            return final  # verified on an earlier try
        tries = 0
        while True:
            try:
                self._transfer(part, partial)
                break
            except DownloadCancelled:
                raise
            except HubError:
                raise
            except Exception as exc:
                tries += 1
                if not _transient(exc) or tries > RETRIES:
                    have = partial.stat().st_size if partial.exists() else 0
                    if have and _transient(exc):  # it was reached: the connection broke
                        raise HubError(
                            f"Downloading {part.name}: the connection was lost "
                            f"({first_line(exc, 120)}) after {RETRIES} retries; "
                            f"{fmt_bytes(have)} are kept; downloading again resumes."
                        ) from exc
                    error = hub_error(exc, f"Downloading {part.name}")
                    if have:
                        raise HubError(
                            f"{error} {fmt_bytes(have)} are kept; downloading again resumes."
                        ) from exc
                    raise error from exc
                if self.cancelled.wait(RETRY_WAIT_S * tries):
                    raise DownloadCancelled(_cancelled(part, partial)) from exc
        self._verify(part, partial)
        os.replace(partial, final)
        self._remove_stale_parts(part)
        return final

    def _remove_stale_parts(self, part: FilePart) -> None:
        """Parts of the same file at other revisions: never to be resumed into this one."""
        for stale in self.folder.glob(f"{glob.escape(Path(part.name).name)}.*{PART_SUFFIX}"):
            if stale.is_file() and not stale.is_symlink():
                stale.unlink(missing_ok=True)

    def _transfer(self, part: FilePart, partial: Path) -> None:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import hf_raise_for_status

        from chatapp.hub import http

        http.refuse_when_offline(f"Downloading {part.name}")
        have = _open_size(partial)
        if part.size is not None and have >= part.size:
            if have > part.size:  # not this file: start again
                partial.unlink()
                have = 0
            else:
                return
        url = hf_hub_url(self.repo, part.name, revision=self.revision, endpoint=endpoint())
        asked = http.headers({"Range": f"bytes={have}-"} if have else None)
        with http.client().stream("GET", url, headers=asked, timeout=60) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            if have and response.status_code != 206:
                have = 0  # the server sent the whole file: write it from the start
            try:
                opened = _open_part(partial, append=have > 0)
            except OSError as exc:
                raise HubError(_write_error(exc, part, partial)) from exc
            with opened as out:
                last = 0.0
                for chunk in response.iter_bytes():  # as received: a drop loses nothing kept
                    if self.cancelled.is_set():
                        break
                    try:
                        out.write(chunk)
                    except OSError as exc:  # this disk, not the network
                        raise HubError(_write_error(exc, part, partial)) from exc
                    self._moved += len(chunk)
                    now = time.monotonic()
                    if now - last >= REPORT_EVERY_S:
                        out.flush()
                        last = now
                        self._report(part)
            if self.cancelled.is_set():  # said once the part is closed: its true size
                raise DownloadCancelled(_cancelled(part, partial))
        self._report(part)
        if part.size is not None and _open_size(partial) < part.size:
            import httpx2

            raise httpx2.RemoteProtocolError("the connection closed before the end of the file")

    def _report(self, part: FilePart) -> None:
        elapsed = time.monotonic() - self._started
        rate = self._moved / elapsed if elapsed > 0.5 else 0.0
        self.progress(DownloadProgress(self._on_disk(), self.file.size or 0, rate, part.name))

    def _verify(self, part: FilePart, partial: Path) -> None:
        size = _open_size(partial)
        if part.size is not None and size != part.size:
            partial.unlink(missing_ok=True)
            raise HubError(
                f"{part.name} arrived with {size} bytes, the hub says {part.size}; it was "
                "removed: download it again."
            )
        if part.sha256 is None:
            return  # not an LFS file: the hub gives no hash to check (size checked above)
        digest = sha256_of(partial, self.cancelled)
        if digest is None:
            raise DownloadCancelled(_cancelled(part, partial))
        if digest != part.sha256.lower():
            partial.unlink(missing_ok=True)
            raise HubError(
                f"{part.name} does not match the hub's sha256 (got {digest[:12]}…, expected "
                f"{part.sha256[:12]}…); the file was removed: download it again."
            )


def _cancelled(part: FilePart, partial: Path) -> str:
    have = partial.stat().st_size if partial.exists() else 0
    return f"Download of {part.name} cancelled; {fmt_bytes(have)} kept to resume."


def _write_error(exc: OSError, part: FilePart, partial: Path) -> str:
    if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        have = partial.stat().st_size if partial.exists() else 0
        return (
            f"The disk is full while writing {part.name} ({fmt_bytes(have)} kept); free some "
            "space and download again to resume."
        )
    return f"Could not write {partial}: {exc.strerror or exc}."


def _transient(exc: BaseException) -> bool:
    """A lost connection or a timeout (tried again), not an answer of the hub's (not)."""
    import httpx2

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(status, int):
        return False  # the hub answered (an error page): say what it said
    return isinstance(exc, httpx2.TransportError)


def _open_size(path: Path) -> int:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not os.path.isfile(path) or os.path.islink(path):
        raise HubError(f"{path} is not a plain file; remove it and download again.")
    return st.st_size


def _open_part(path: Path, append: bool) -> BinaryIO:
    """The partial file: created exclusively when starting, appended to when resuming; never
    through a link (O_NOFOLLOW where the platform has it)."""
    flags = os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
    if append:
        flags |= os.O_APPEND
    else:
        path.unlink(missing_ok=True)
        flags |= os.O_CREAT | os.O_EXCL
    return os.fdopen(os.open(path, flags, 0o644), "wb")


def sha256_of(path: Path, cancelled: threading.Event | None = None) -> str | None:
    """The file's sha256 (hex); None when cancelled meanwhile."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(CHUNK * 4):
            if cancelled is not None and cancelled.is_set():
                return None
            digest.update(block)
    return digest.hexdigest()
