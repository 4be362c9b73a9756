"""Where a conversion may write: the folders it may replace, and cleaning up killed runs.

A conversion writes into a fresh hidden sibling (`.NAME.partial-PID-XXXX`) and renames it into
place at the end; an existing folder is first renamed to `.NAME.old-PID-XXXX` and removed once
the new one is in. So `--force` deletes a whole folder: it is allowed only for a folder this
converter made (its manifest says so) holding nothing but the files the manifest lists, and
never for a folder that holds the source GGUF (after resolving links, and hard links too).

A conversion killed outright (kill -9, power loss) leaves its hidden sibling behind. Each run
removes such leftovers beside its output when the process that made them is gone: a partial
folder carries `chatapp-partial.json` (pid, host) from its first moment, an old one its manifest.
Every deletion goes through `remove_conversion_folder` (chatapp/safe_delete.py): only such a
folder of ours, never a link, and links inside it are removed as links.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

from chatapp.convert.errors import ConversionError
from chatapp.folder_format.manifest import MANIFEST_FILE
from chatapp.json_text import parse_json_text
from chatapp.safe_delete import remove_owned, write_replacing

PARTIAL_MARKER = "chatapp-partial.json"
_LEFTOVER = re.compile(r"^\..+\.(partial|old)-(\d+)(?:-[A-Za-z0-9_]+)?$")


MAX_OWN_JSON_BYTES = 1 << 20  # a manifest lists a folder's few files: a few kilobytes


def read_json(path: Path) -> dict[str, Any] | None:
    """One of the converter's own JSON files (a manifest, a partial marker) as an object; None
    when it is absent or none the converter wrote: a link, too big, not JSON, nested too deeply
    (RecursionError, which is no ValueError) or not an object."""
    try:
        if path.is_symlink() or path.stat().st_size > MAX_OWN_JSON_BYTES:
            return None
        data = parse_json_text(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # JsonTextError and UnicodeDecodeError are ValueErrors
        return None
    return data if isinstance(data, dict) else None


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest; None when it has none the converter could have written: the parts
    that are read must have their types ("files": plain file names and their hashes)."""
    manifest = read_json(folder / MANIFEST_FILE)
    if manifest is None:
        return None
    if any(not isinstance(manifest.get(key, {}), dict) for key in ("source", "options", "files")):
        return None
    files = manifest.get("files", {})
    if not all(_plain_name(name) and isinstance(sha, str) for name, sha in files.items()):
        return None
    return manifest


def _plain_name(name: str) -> bool:
    return name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def made_by_chatapp(folder: Path) -> bool:
    manifest = read_manifest(folder)
    return manifest is not None and manifest.get("converter") == "chatapp"


def check_source(src: Path) -> None:
    if not src.exists():
        raise ConversionError(f"{src} does not exist.")
    if src.is_dir():
        raise ConversionError(f"{src} is a folder; give the .gguf file itself.")
    if not src.is_file():
        raise ConversionError(f"{src} is not a regular file (a device or a pipe?).")


def check_destination(src: Path, out: Path, overwrite: bool) -> None:
    """Refuse an output that is, holds or would delete the source, or is not ours to replace."""
    src_real, out_real = src.resolve(), out.resolve()
    if out_real == src_real:
        raise ConversionError(f"{out} is the GGUF file itself; choose a folder for the output.")
    if src_real.is_relative_to(out_real):
        raise ConversionError(
            f"{out} holds the GGUF file being converted ({src.name}); choose another folder "
            "for the output (a conversion replaces its whole output folder)."
        )
    if out.is_symlink():
        raise ConversionError(f"{out} is a symbolic link; give the real folder or a new name.")
    if not out.exists():
        return
    if not out.is_dir():
        raise ConversionError(f"{out} exists and is not a folder; choose a new folder name.")
    if not overwrite:
        raise ConversionError(f"{out} already exists: choose a new folder or pass --force.")
    entries = list(out.iterdir())
    if not entries:
        return
    manifest = read_manifest(out)
    if manifest is None or manifest.get("converter") != "chatapp":
        raise ConversionError(
            f"{out} was not made by chatapp (it has no {MANIFEST_FILE}), so --force does not "
            "replace it; choose a new folder, or empty it yourself."
        )
    listed = set(manifest.get("files") or {}) | {MANIFEST_FILE}
    for entry in entries:
        if entry.name not in listed or entry.is_symlink() or not entry.is_file():
            raise ConversionError(
                f"{out} holds '{entry.name}', which chatapp did not write there; --force "
                "replaces only chatapp's own files. Move it out, or choose a new folder."
            )
        if os.path.samefile(entry, src):
            raise ConversionError(f"{out} holds the GGUF file being converted ({entry.name}).")


def write_partial_marker(tmp: Path) -> None:
    marker = {"converter": "chatapp", "pid": os.getpid(), "host": socket.gethostname()}
    write_replacing(tmp / PARTIAL_MARKER, json.dumps(marker) + "\n")


def clean_leftovers(parent: Path) -> list[Path]:
    """Remove `.NAME.partial-PID*` / `.NAME.old-PID*` folders of conversions that died."""
    removed: list[Path] = []
    try:
        entries = list(parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _LEFTOVER.match(entry.name)
        if match is None or entry.is_symlink() or not entry.is_dir():
            continue
        pid = int(match.group(2))
        if pid == os.getpid() or _alive(pid) or not _ours(entry, match.group(1)):
            continue
        if remove_conversion_folder(entry):
            removed.append(entry)
    return removed


def remove_conversion_folder(folder: Path) -> bool:
    """Delete a conversion's own folder: its `.partial` one (marked, or still empty), or an
    output it made (its manifest says chatapp); True when it is gone. The folder the user chose
    to write into may be reached through a link; the folder itself may not."""
    parent = folder.parent.resolve()
    return remove_owned(parent / folder.name, parent, _conversion_owned)


def _conversion_owned(folder: Path) -> bool:
    marker = read_json(folder / PARTIAL_MARKER)
    if marker is not None and marker.get("converter") == "chatapp":
        return True
    return made_by_chatapp(folder) or not any(folder.iterdir())


def _ours(folder: Path, kind: str) -> bool:
    marker = read_json(folder / PARTIAL_MARKER)
    if marker is not None and marker.get("converter") == "chatapp":
        # A shared folder can hold another computer's running conversion: same pid, other host.
        return marker.get("host") in (None, socket.gethostname())
    return made_by_chatapp(folder) and kind in ("partial", "old")


def _alive(pid: int) -> bool:
    """Whether a process with this id runs here; when unsure, yes (keep the folder)."""
    if pid <= 0:
        return True
    if sys.platform == "win32":
        return _alive_windows(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists, under another user
        return True
    return True


def _alive_windows(pid: int) -> bool:
    # os.kill(pid, 0) would terminate the process on Windows; ask the kernel instead.
    try:
        import ctypes

        kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
        handle = kernel32.OpenProcess(0x00100000, False, pid)  # SYNCHRONIZE
        if not handle:
            return bool(kernel32.GetLastError() == 5)  # access denied: it exists
        try:
            return bool(kernel32.WaitForSingleObject(handle, 0) == 0x102)  # WAIT_TIMEOUT
        finally:
            kernel32.CloseHandle(handle)
    except Exception:
        return True
