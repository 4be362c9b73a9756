"""`chatapp search TEXT` and `chatapp pull REPO [FILE | --quant Q]`: models from the Hugging Face
Hub (HF_ENDPOINT, HF_TOKEN honoured). The only commands that contact the hub."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TypeVar

from chatapp.cli.errors import UserError, terminate_as_interrupt
from chatapp.cli.progress import ProgressBar
from chatapp.hub.catalog import HubFile, RepoFiles
from chatapp.hub.errors import HubError
from chatapp.session import arg_checks as checks
from chatapp.units import fmt_bytes

T = TypeVar("T")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    search = sub.add_parser(
        "search", help="search the Hugging Face Hub for text-generation models with GGUF files"
    )
    search.add_argument("text", help="words of the repository's name, e.g. SmolLM2")
    search.add_argument("--limit", type=checks.whole(1, 200, "a count"), default=20)
    search.add_argument("--json", action="store_true", help="one JSON list on stdout")
    search.set_defaults(func=run_search)

    pull = sub.add_parser(
        "pull",
        help="download a GGUF from the Hugging Face Hub (resumable, sha256 checked) and convert it",
    )
    pull.add_argument("repo", help="the repository, e.g. bartowski/SmolLM2-135M-Instruct-GGUF")
    pull.add_argument("file", nargs="?", help="the GGUF file in it (without: --quant, or a list)")
    pull.add_argument("--quant", help="the file of this quantization, e.g. Q4_K_M")
    pull.add_argument("--revision", help="a branch, tag or commit (default: the main branch)")
    pull.add_argument(
        "--context",
        type=checks.whole(1, checks.MAX_CONTEXT, "a context length"),
        default=None,
        help="for the fit estimate and the conversion (default: the file's, capped as the "
        "engine caps it)",
    )
    pull.add_argument(
        "--no-convert", action="store_true", help="only download (prints the GGUF's path)"
    )
    pull.add_argument("--json", action="store_true", help="list the files as JSON (no file named)")
    pull.set_defaults(func=run_pull)


def run_search(args: argparse.Namespace) -> int:
    from chatapp.hub.catalog import search

    hits = _hub(lambda: search(args.text, args.limit))
    if args.json:
        json.dump([vars(h) for h in hits], sys.stdout, indent=1)
        print()
        return 0
    if not hits:
        print(f"chatapp: no GGUF repositories found for {args.text!r}", file=sys.stderr)
        return 0
    width = max(len(h.repo) for h in hits)
    for h in hits:
        gated = "  (gated)" if h.gated else ""
        print(f"{h.repo:<{width}}  {h.downloads or 0:>10,} downloads  {h.last_modified}{gated}")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    from chatapp.datadir import models_dir
    from chatapp.hub.catalog import repo_files
    from chatapp.hub.download import Download, DownloadProgress, downloaded_file

    listing = _hub(lambda: repo_files(args.repo, args.revision))
    if args.file is None and args.quant is None:
        _print_files(listing, args.context, args.json)
        raise UserError(f"name one of the files of {listing.repo}, or a --quant of them.")
    chosen = listing.find(args.file, args.quant)
    if chosen is None:
        what = f"no file {args.file!r}" if args.file else f"no {args.quant} file"
        names = ", ".join(f.name for f in listing.files) or "none"
        raise UserError(f"{listing.repo} has {what}; its GGUF files: {names}.")
    if chosen.not_a_model:
        raise UserError(f"{chosen.name} is {chosen.not_a_model}.")
    if downloaded_file(models_dir(), listing.repo, chosen, listing.revision) is None:
        _check_fit(listing, chosen, args.context)
    bar = ProgressBar("pull")
    shown = {"percent": -1}
    every_update = bar.stream.isatty()

    def show(progress: DownloadProgress) -> None:
        # A terminal redraws its line; a log gets a line per whole percent, not four a second.
        percent = int(progress.fraction * 100)
        if every_update or percent != shown["percent"]:
            shown["percent"] = percent
            bar(progress.fraction, progress.line())

    download = Download(models_dir(), listing.repo, listing.revision, chosen, show)
    print(
        f"chatapp: {listing.repo} / {chosen.name} at {listing.revision[:10]}: "
        f"{fmt_bytes(chosen.size or 0)} into {download.folder}",
        file=sys.stderr,
        flush=True,
    )
    with terminate_as_interrupt():
        try:
            gguf = _hub(download.run)
        except KeyboardInterrupt:
            bar.close()
            print("chatapp: the part downloaded is kept; pull again to resume.", file=sys.stderr)
            raise
        finally:
            bar.close()
    if args.no_convert:
        print(gguf)
        return 0
    from chatapp.cli.convert_cmds import convert_file
    from chatapp.convert.converter import ConvertOptions, earlier_conversion
    from chatapp.store.model_library import folder_name

    opts = ConvertOptions(context_length=args.context).resolved()
    target = models_dir() / folder_name(gguf)
    earlier = earlier_conversion(gguf, target, opts)
    print(earlier if earlier is not None else convert_file(gguf, target, opts))
    return 0


def _check_fit(listing: RepoFiles, chosen: HubFile, context: int | None) -> None:
    """Before gigabytes are fetched: the header's first bytes (one ranged request) say the
    architecture and the KV cache; a family the converter lacks is refused, a model that does
    not fit the memory free now is said (it may fit once other programs close)."""
    from chatapp.hub.fit import fit
    from chatapp.hub.probe import probe

    shape = _hub(lambda: probe(listing.repo, chosen.parts[0].name, listing.revision))
    verdict = fit(chosen, listing.architecture, shape, context)
    if verdict.mark in ("unsupported", "not a model"):
        raise UserError(verdict.why)
    print(f"chatapp: {verdict.why}", file=sys.stderr, flush=True)


def _print_files(listing: RepoFiles, context: int | None, as_json: bool) -> None:
    from chatapp.hub.fit import fit

    rows = []
    for f in listing.files:
        verdict = fit(f, listing.architecture, None, context)
        rows.append((f, verdict))
    if as_json:
        json.dump(
            [
                {
                    "file": f.name,
                    "quant": f.quant,
                    "size": f.size,
                    "parts": len(f.parts),
                    "usable": v.usable,
                    "mark": v.mark,
                    "why": v.why,
                }
                for f, v in rows
            ],
            sys.stdout,
            indent=1,
        )
        print()
        return
    width = max((len(f.name) for f in listing.files), default=0)
    for f, v in rows:
        size = fmt_bytes(f.size) if f.size is not None else "?"
        print(f"{f.name:<{width}}  {f.quant or '':<8} {size:>10}  {v.mark:<11} {v.why}")


def _hub(call: Callable[[], T]) -> T:
    """`call`, its HubError a one-line error of the command line."""
    try:
        return call()
    except HubError as exc:
        raise UserError(str(exc)) from exc
