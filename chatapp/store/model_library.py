"""The prepared models in the data folder's models/: list them (size on disk, source,
precision), find the folder a GGUF file was already converted into (by its sha256, whatever the
folder is called), and remove one. No Qt.

Only direct sub-folders of the models folder are looked at or removed, never what a link
points to: removing follows the same rule as `convert --force` (a folder chatapp made, holding
only its own files) or, for a folder put there by hand, asks the caller to confirm first.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chatapp.convert.converter import ConvertOptions, converted_from, subfolders
from chatapp.convert.output_folder import read_manifest
from chatapp.engine.model_folder.read import candidate_files, split_name
from chatapp.safe_delete import remove_owned

# llama.cpp's quantization names as they appear in GGUF file names.
_GGUF_TYPE = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.I)


class LibraryError(Exception):
    """A model that cannot be removed, in words for the user."""


@dataclass(frozen=True)
class LibraryModel:
    folder: Path
    size_bytes: int  # on disk, links not followed
    source: str  # "SmolLM2-135M-Instruct.Q4_1.gguf" or "ONNX folder"
    precision: str  # "Q4_1 (GGUF)", "fp32, q4", "ONNX"
    converted: bool  # made by chatapp's converter (its manifest says so)
    source_sha256: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # the converter's, from its manifest

    @property
    def name(self) -> str:
        return self.folder.name


def list_library(models: Path) -> list[LibraryModel]:
    """The model folders in `models`, by name (a folder without any .onnx is left out)."""
    try:
        entries = sorted(models.iterdir(), key=lambda p: p.name.lower())
    except OSError:
        return []
    found = []
    for entry in entries:
        if entry.name.startswith(".") or entry.is_symlink() or not entry.is_dir():
            continue  # hidden: a conversion in progress or its leftovers
        model = describe(entry)
        if model is not None:
            found.append(model)
    return found


def describe(folder: Path) -> LibraryModel | None:
    manifest = read_manifest(folder)  # checked: "source" and "options" are objects
    if manifest is not None and manifest.get("converter") == "chatapp":
        source = manifest.get("source") or {}
        file_name = str(source.get("file") or "a GGUF file")
        match = _GGUF_TYPE.search(Path(file_name).stem)
        precision = f"{match.group(1).upper()} (GGUF)" if match else "GGUF"
        sha = source.get("sha256")
        options = manifest.get("options")
        return LibraryModel(
            folder,
            disk_usage(folder),
            file_name,
            precision,
            True,
            sha if isinstance(sha, str) else None,
            options if isinstance(options, dict) else {},
        )
    graphs = candidate_files(folder)
    if not graphs:
        return None
    named = sorted({split_name(g.name)[1] or "" for g in graphs} - {""})
    precision = ", ".join(named) if named else "ONNX"
    return LibraryModel(folder, disk_usage(folder), "ONNX folder", precision, False)


def folder_name(gguf: Path) -> str:
    """A model folder name from a GGUF file name (safe on every file system)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", gguf.stem).strip("-.") or "model"


MAX_NAME_BYTES = 255  # a file name's limit on Linux, macOS and Windows file systems


def library_folder(models: Path, name: str) -> Path | None:
    """The folder of the model called `name` in `models` (a chat remembers its model by name),
    or None. The name comes from the history, an imported chat's included, so only a plain
    folder name directly inside `models` counts: no separators, no "..", no links, not hidden
    (a conversion in progress)."""
    if not name or name.startswith(".") or any(c in name for c in "/\\\0"):
        return None
    if len(os.fsencode(name)) > MAX_NAME_BYTES:  # no folder has such a name (ENAMETOOLONG)
        return None
    folder = models / name
    try:
        if folder.is_symlink() or not folder.is_dir():
            return None
    except OSError:  # what the file system refuses to look up is not a model of the library
        return None
    return folder if describe(folder) is not None else None


def find_converted(
    models: Path, source_sha256: str, options: ConvertOptions | None = None
) -> Path | None:
    """A folder in `models` converted from the GGUF with this sha256 by this converter
    version, with the same conversion options, intact (its files checked against its
    manifest); None if there is none. Reads only the manifests of chatapp's folders."""
    for folder in subfolders(models):
        if converted_from(folder, source_sha256, options):
            return folder
    return None


def remove_model(models: Path, folder: Path) -> None:
    """Delete `folder`, a direct sub-folder of `models`; LibraryError says why not."""
    models_real = models.resolve()
    if folder.is_symlink() or folder.resolve().parent != models_real:
        raise LibraryError(f"{folder} is not a folder of the model library ({models}).")
    if not folder.is_dir():
        raise LibraryError(f"{folder.name} is no longer there.")
    # The user chose this folder: any of the library's may go, but never through a link.
    if not remove_owned(models_real / folder.name, models_real, lambda _folder: True):
        raise LibraryError(
            f"Could not remove all of {folder.name}: a file in it is read-only or in use."
        )


def disk_usage(folder: Path) -> int:
    """Bytes the folder's files take on disk (links not followed, hard links counted once)."""
    total, seen = 0, set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            blocks = getattr(st, "st_blocks", None)
            total += blocks * 512 if blocks is not None else st.st_size
    return total
