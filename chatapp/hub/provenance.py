"""Where a downloaded model file came from: `<file>.origin.json` beside it (repository, file,
revision, endpoint, size, sha256 of each part), written through an exclusively created
temporary file renamed into place. The model list reads it back by the GGUF's sha256, which a
converted folder's manifest keeps."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chatapp.safe_delete import replacing

# Downloads wait in this hidden folder of the models folder (the model list skips it).
DOWNLOADS = ".downloads"
ORIGIN_SUFFIX = ".origin.json"
MAX_ORIGIN_BYTES = 64 << 10
# What reading a damaged origin raises: also RecursionError (nested too deeply, no ValueError)
# and OverflowError (a size of 1e400 is int(inf)).
_NOT_OURS = (
    OSError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    ArithmeticError,
    RecursionError,
)


@dataclass(frozen=True)
class Origin:
    repo: str
    file: str  # the path in the repository (a split's first part)
    revision: str  # the commit
    endpoint: str
    size: int
    sha256: list[str] = field(default_factory=list)  # each part's, as the hub gave it
    parts: list[str] = field(default_factory=list)
    file_sha256: str = ""  # of the file on disk (the joined one for a split); filled on demand

    def line(self) -> str:
        """Short, for a table's cell: the repository and the commit."""
        return f"{self.repo} @ {self.revision[:7]}"

    def describe(self) -> str:
        return f"{self.endpoint}/{self.repo}, file {self.file}, commit {self.revision}"


def origin_path(model_file: Path) -> Path:
    return model_file.with_name(model_file.name + ORIGIN_SUFFIX)


def write_origin(model_file: Path, origin: Origin) -> None:
    with replacing(origin_path(model_file)) as fh:
        json.dump(asdict(origin), fh, indent=1)


def read_origin(model_file: Path) -> Origin | None:
    """The origin beside `model_file`; None when there is none or it is not one of ours."""
    path = origin_path(model_file)
    try:
        if path.is_symlink() or path.stat().st_size > MAX_ORIGIN_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        lists = [data.get("sha256", []), data.get("parts", [])]
        if not all(isinstance(value, list) for value in lists) or data["size"] < 0:
            return None  # not what write_origin wrote ("sha256": "abc" read as three hashes)
        return Origin(
            repo=str(data["repo"]),
            file=str(data["file"]),
            revision=str(data["revision"]),
            endpoint=str(data.get("endpoint", "")),
            size=int(data["size"]),
            sha256=[str(s) for s in lists[0]],
            parts=[str(s) for s in lists[1]],
            file_sha256=str(data.get("file_sha256", "")),
        )
    except _NOT_OURS:
        return None


def origins_by_sha256(models: Path) -> dict[str, Origin]:
    """Every download's origin in `models/.downloads`, by the sha256 of the file on disk (what
    a converted folder's manifest names as its source)."""
    found: dict[str, Origin] = {}
    root = models / DOWNLOADS
    try:
        repos = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return found
    for folder in repos:
        for meta in folder.glob("*" + ORIGIN_SUFFIX):
            model_file = meta.with_name(meta.name.removesuffix(ORIGIN_SUFFIX))
            origin = read_origin(model_file)
            if origin is None:
                continue
            digest = origin.file_sha256 or (origin.sha256[0] if len(origin.sha256) == 1 else "")
            if digest:
                found[digest.lower()] = origin
    return found
