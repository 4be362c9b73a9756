"""The weight files a session maps, checked before each run so that one changed on disk is
refused instead of killing the process. No Qt.

ONNX Runtime maps a folder's external data (`model.onnx.data`: the GGUF's blocks for the native
kernels, a packed copy's weights) instead of reading it. If another program cuts such a file
short (a sync tool, a failed copy), the next read of a page past the new end raises SIGBUS and
the window or server dies with no word. So each file's identity (device, inode), size and
modification time are recorded when the session is made, and every forward checks them first:
a few `stat` calls (microseconds) against a step of milliseconds. A changed file stops the run
with one line naming it; opening the model again maps the file as it now is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from chatapp.engine.errors import ModelError


@dataclass(frozen=True)
class _Identity:
    device: int
    inode: int
    size: int
    mtime_ns: int


def _identity(path: Path) -> _Identity:
    st = os.stat(path)
    return _Identity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class MappedFilesChanged(ModelError):
    """A mapped weight file changed on disk after the model was loaded."""


class MappedFiles:
    """The identities of `files` now; `check` raises MappedFilesChanged once one differs."""

    def __init__(self, files: Iterable[Path], model_name: str) -> None:
        self.model_name = model_name
        self._known = {Path(f): _identity(Path(f)) for f in files}

    @property
    def files(self) -> tuple[Path, ...]:
        return tuple(self._known)

    def check(self) -> None:
        for path, known in self._known.items():
            try:
                changed = _identity(path) != known
            except OSError:
                changed = True
            if changed:
                raise MappedFilesChanged(
                    f"{path.name} of {self.model_name} changed on disk after the model was "
                    f"loaded (cut short, replaced or removed by another program); restore it "
                    "and open the model again."
                )
