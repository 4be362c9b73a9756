"""`chatapp bench`'s measurements: the loops' comparison (with its peers and report),
`--parallel N` and `--speculative`. Each runs as a job on an engine service
(session/engine_service.py `call`), as `chatapp generate` answers: its progress lines are
printed here as they come."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from chatapp.cli.errors import UserError
from chatapp.engine.modes import Mode
from chatapp.session.engine_service import call

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine


def say(line: object) -> None:
    print(line, file=sys.stderr)


def measured_alone(args: argparse.Namespace, what: str) -> None:
    """These measurements take none of the loops' comparison's options, but --speculative
    takes --peer llamacpp (llama.cpp's plain decode beside ours)."""
    speculative = what == "--speculative"
    peer = args.peer not in (("", "llamacpp") if speculative else ("",))
    if args.report is not None or peer or args.sweep or args.context_tokens:
        leave = "--peer other than llamacpp" if speculative else "--peer"
        raise UserError(f"{what} measures on its own: leave out --report, {leave}, --sweep.")


def llama_gguf(named: Path | None, model_dir: Path, peers: tuple[str, ...]) -> Path | None:
    """The GGUF llama.cpp runs: the one named, or the bundled file the default model came from
    (found here, above both the engine and the converter)."""
    if named is not None or "llamacpp" not in peers:
        return named
    from chatapp.convert.default_model import FOLDER_NAME, bundled_gguf

    return bundled_gguf() if model_dir.expanduser().name == FOLDER_NAME else None


def run_suite(args: argparse.Namespace, model_dir: Path) -> int:
    """The loops on one prompt (and the peers, the sweep, the floor), with `--report`."""
    from chatapp.engine.bench.report import markdown_report
    from chatapp.engine.bench.run import BenchConfig, run_bench_suite

    peers = tuple(p.strip() for p in args.peer.split(",") if p.strip())
    config = BenchConfig(
        model_dir=model_dir,
        onnx_file=args.onnx_file,
        device=args.device,
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        modes=tuple(Mode(m) for m in args.modes),
        repeats=args.repeats,
        threads=args.threads,
        precision=args.precision,
        max_context=args.context,
        context_tokens=args.context_tokens,
        peers=peers,
        peer_gguf=llama_gguf(args.peer_gguf, model_dir, peers),
        peer_python=args.peer_python,
        sweep=args.sweep or [],
        floor=not args.no_floor,
    )
    if args.report is not None and args.report.exists() and not args.report.is_dir():
        raise UserError(f"--report {args.report} is a file; give a folder for the report.")
    result = call("bench", lambda put, _stopped: run_bench_suite(config, progress=put), say)
    if args.report is not None:
        # Charts are drawn with QtCharts: the GUI draws them (offscreen without a display).
        from chatapp.gui import write_bench_report

        write_bench_report(result, args.report)
    print(json.dumps(result, indent=2) if args.json else markdown_report(result))
    return 0


def run_parallel_bench(args: argparse.Namespace, engine: Engine) -> int:
    from chatapp.engine.bench.parallel import measure_parallel, parallel_sentences

    say(f"chatapp bench: 1 client, then {args.parallel} together")
    result = call(
        "bench",
        lambda _put, _stopped: measure_parallel(engine, args.parallel, args.max_new_tokens),
        say,
    )
    if args.json:
        named = {"model": engine.info.name, "precision": engine.precision_in_effect}
        print(json.dumps({**named, **result.to_dict()}, indent=2))
    else:
        print("\n".join(parallel_sentences(result)))
    return 0


def run_speculative_bench(args: argparse.Namespace, engine: Engine) -> int:
    from chatapp.engine.bench.peers import PeerSettings
    from chatapp.engine.bench.speculative import measure_speculative, speculative_lines

    peers = ("llamacpp",) if args.peer == "llamacpp" else ()
    gguf = llama_gguf(args.peer_gguf, engine.info.folder, peers)
    peer = PeerSettings(peers, args.threads, gguf, args.peer_python) if peers else None
    say(
        "chatapp bench: plain against speculative decoding"
        + (" and llama.cpp's plain decode" if peer else "")
    )
    result = call(
        "bench",
        lambda put, _stopped: measure_speculative(
            engine, args.max_new_tokens, args.repeats, peer=peer, progress=put
        ),
        say,
    )
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print("\n".join(speculative_lines(result)))
    return 0
