"""What the hub has: repositories with GGUF files for a search, and a repository's GGUF files
(quantization from the file name, size and sha256 from the hub's LFS metadata, split files as
one entry)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import quote

from chatapp.hub.errors import HubError, endpoint
from chatapp.hub.http import get_json

SEARCH_LIMIT = 40
# llama.cpp's split files: NAME-00001-of-00003.gguf
_SPLIT = re.compile(r"^(?P<base>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.I)
# llama.cpp's quantization names as they appear in GGUF file names.
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|FP32)(?![A-Za-z0-9])", re.I
)
# Files in GGUF repositories that are not a language model's weights.
_NOT_A_MODEL = (
    (re.compile(r"mmproj", re.I), "a vision projector for a multimodal model, not a chat model"),
    (re.compile(r"imatrix", re.I), "an importance matrix for quantizing, not a model"),
)


@dataclass(frozen=True)
class RepoHit:
    """One repository a search found."""

    repo: str
    downloads: int | None
    likes: int | None
    gated: bool
    last_modified: str  # ISO date, or ""


@dataclass(frozen=True)
class FilePart:
    name: str  # the path in the repository
    size: int | None
    sha256: str | None  # the LFS object id: the sha256 of the file's bytes


@dataclass(frozen=True)
class HubFile:
    """One model file of a repository; a split GGUF is one HubFile of several parts."""

    name: str  # the first part's path (what the user names)
    parts: tuple[FilePart, ...]
    quant: str | None  # "Q4_K_M", from the name
    not_a_model: str | None = None  # why this file is no chat model (a projector, a matrix)

    @property
    def size(self) -> int | None:
        sizes = [p.size for p in self.parts]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)

    @property
    def is_split(self) -> bool:
        return len(self.parts) > 1

    @property
    def local_name(self) -> str:
        """The single file this becomes on disk (the parts joined): the base name."""
        match = _SPLIT.match(PurePosixPath(self.name).name)
        return f"{match.group('base')}.gguf" if match else PurePosixPath(self.name).name


@dataclass(frozen=True)
class RepoFiles:
    repo: str
    revision: str  # the commit the listing is of: downloads ask for exactly this one
    architecture: str | None  # the hub's reading of the GGUF header, when it gives one
    context_length: int | None
    gated: bool
    files: tuple[HubFile, ...]

    def find(self, name: str | None = None, quant: str | None = None) -> HubFile | None:
        """The file called `name` (a path or a base name), else the one of quantization
        `quant` (the smallest, if several)."""
        for f in self.files:
            if name is not None and name in (f.name, PurePosixPath(f.name).name, f.local_name):
                return f
        if quant is not None:
            same = [f for f in self.files if f.quant and f.quant.upper() == quant.upper()]
            same.sort(key=lambda f: f.size or 0)
            return same[0] if same else None
        return None


def quant_of(file_name: str) -> str | None:
    match = _QUANT.search(PurePosixPath(file_name).stem)
    return match.group(1).upper() if match else None


def search(text: str, limit: int = SEARCH_LIMIT) -> list[RepoHit]:
    """Text-generation repositories with GGUF files whose name matches `text`, most
    downloaded first."""
    text = text.strip()
    if not text:
        return []
    # One page of the endpoint HfApi.list_models reads, asked directly: its pagination
    # retries a refused or unreachable hub for about 20 s before saying so.
    from huggingface_hub.hf_api import ModelInfo

    params = {
        "search": text,
        "filter": "gguf",
        "pipeline_tag": "text-generation",
        "sort": "downloads",
        "direction": "-1",
        "limit": str(limit),
    }
    what = f"Searching for {text!r}"
    items = get_json(f"{endpoint()}/api/models", what, params)
    try:
        found = [ModelInfo(**item) for item in items[:limit]]
    except (TypeError, KeyError, ValueError) as exc:
        raise HubError(f"{what}: the hub's answer is not a list of models.") from exc
    hits = []
    for info in found:
        modified = getattr(info, "last_modified", None)
        hits.append(
            RepoHit(
                repo=str(info.id),
                downloads=info.downloads,
                likes=info.likes,
                gated=bool(info.gated),
                last_modified=modified.date().isoformat() if modified else "",
            )
        )
    return hits


def repo_files(repo: str, revision: str | None = None) -> RepoFiles:
    """The GGUF files of `repo` at `revision` (None: the default branch) with their sizes and
    sha256, the commit they are at, and the architecture the hub read from them."""
    # HfApi.model_info's request (files_metadata=True: `blobs`), on chatapp's client.
    from huggingface_hub.hf_api import ModelInfo

    url = f"{endpoint()}/api/models/{repo}"
    if revision is not None:
        url += f"/revision/{quote(revision, safe='')}"
    what = f"Listing {repo}"
    data = get_json(url, what, {"blobs": "true"})
    try:
        info = ModelInfo(**data)
    except (TypeError, KeyError, ValueError) as exc:
        raise HubError(f"{what}: the hub's answer does not describe a repository.") from exc
    parts = [
        FilePart(
            s.rfilename,
            s.lfs.size if s.lfs is not None else s.size,
            s.lfs.sha256 if s.lfs is not None else None,
        )
        for s in info.siblings or []
        if s.rfilename.lower().endswith(".gguf")
    ]
    gguf = info.gguf if isinstance(info.gguf, dict) else {}
    architecture = gguf.get("architecture")
    context = gguf.get("context_length")
    return RepoFiles(
        repo=str(info.id),
        revision=str(info.sha or revision or "main"),
        architecture=architecture if isinstance(architecture, str) else None,
        context_length=context if isinstance(context, int) else None,
        gated=bool(info.gated),
        files=group_parts(parts),
    )


def group_parts(parts: list[FilePart]) -> tuple[HubFile, ...]:
    """One HubFile per model: the parts of a split GGUF together (in order), when all of them
    are there; a split with a part missing is left out (it could not be used)."""
    splits: dict[tuple[str, int], dict[int, FilePart]] = {}
    files: list[HubFile] = []
    for part in parts:
        match = _SPLIT.match(part.name)
        if match is None:
            files.append(HubFile(part.name, (part,), quant_of(part.name), _not_a_model(part.name)))
            continue
        key = (match.group("base"), int(match.group("count")))
        splits.setdefault(key, {})[int(match.group("no"))] = part
    for (base, count), numbered in splits.items():
        if sorted(numbered) != list(range(1, count + 1)):
            continue
        ordered = tuple(numbered[n] for n in range(1, count + 1))
        files.append(HubFile(ordered[0].name, ordered, quant_of(base), _not_a_model(base)))
    return tuple(sorted(files, key=lambda f: f.name.lower()))


def _not_a_model(name: str) -> str | None:
    for pattern, why in _NOT_A_MODEL:
        if pattern.search(PurePosixPath(name).name):
            return why
    return None
