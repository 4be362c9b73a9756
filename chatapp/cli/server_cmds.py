"""`chatapp serve`: the model behind an OpenAI-compatible API (docs/server.md)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from chatapp.cli.engine_cmds import add_model_args, start_engine
from chatapp.cli.errors import UserError
from chatapp.engine.modes import MODES, Mode
from chatapp.server.security import AccessOptionError, host_option, origin_option
from chatapp.session import arg_checks as checks

if TYPE_CHECKING:
    from chatapp.engine.engine import Engine
    from chatapp.server.worker import EngineWorker

API_KEY_ENV = "CHATAPP_API_KEY"
MAX_PARALLEL = 16
DEFAULT_PARALLEL = 4  # as llama.cpp's server: 4 slots in one KV budget


def add_parsers(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve the model over an OpenAI-compatible HTTP API (127.0.0.1 by default)",
        description="OpenAI-compatible /v1/chat/completions, /v1/completions, /v1/responses and "
        "/v1/models. "
        "Up to 4 requests decode together where the model can (--parallel N), within one KV "
        "budget (--kv-budget); the others wait their turn.",
    )
    add_model_args(serve)  # --json: print the address as JSON once listening
    serve.add_argument(
        "--mode", choices=MODES, default=Mode.IOBINDING, help="the loop when a request names none"
    )
    serve.add_argument(
        "--host", type=checks.text, default="127.0.0.1", help="IP address to listen on"
    )
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow an address other machines can reach (needs an API key)",
    )
    serve.add_argument(
        "--api-key",
        type=checks.text,
        default=None,
        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}, which stays "
        "out of the process list)",
    )
    serve.add_argument(
        "--served-model-name", type=checks.text, default=None, help="the model id clients use"
    )
    serve.add_argument(
        "--alias",
        type=checks.text,
        action="append",
        default=[],
        metavar="NAME",
        help="another name /v1/models lists for the model (repeatable; any name is answered)",
    )
    serve.add_argument(
        "--allow-host",
        type=_access_option(host_option),
        action="append",
        default=[],
        metavar="NAME",
        help="answer requests whose Host header is NAME too (repeatable; default: the bound "
        "address, localhost, 127.0.0.1 and [::1])",
    )
    serve.add_argument(
        "--allow-origin",
        type=_access_option(origin_option),
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages at ORIGIN (e.g. http://localhost:5173) use the API, with CORS "
        "(repeatable; '*' needs --api-key)",
    )
    serve.add_argument(
        "--max-queue", type=int, default=16, help="requests waiting at once before 503"
    )
    serve.add_argument(
        "--parallel",
        type=checks.whole(1, MAX_PARALLEL, "a number of requests"),
        default=None,
        metavar="N",
        help=f"decode up to N requests together, in one batched step (IO-Binding loop, CPU, "
        f"GroupQueryAttention graphs; default {DEFAULT_PARALLEL} where the model can, else 1)",
    )
    serve.add_argument(
        "--kv-budget",
        type=checks.whole(1, 16 * checks.MAX_CONTEXT, "a number of positions"),
        default=None,
        metavar="TOKENS",
        help="KV positions all requests together may hold (at least --context; default: one "
        "--context): a request reserves its prompt and a piece of its answer, and more as it "
        "goes; when they do not fit, new requests wait and the latest running one is "
        "pre-empted (computed again later, the same answer)",
    )
    serve.add_argument(
        "--speculative",
        action="store_true",
        help="each request drafts tokens from its own conversation and verifies several per "
        "step (the same answers; faster where they repeat the prompt; GGUF kernels, fast)",
    )
    serve.add_argument("--quiet", action="store_true", help="no per-request log lines")
    serve.set_defaults(func=run_serve)


def _access_option(check: Callable[[str], str]) -> Callable[[str], str]:
    def parse(value: str) -> str:
        try:
            return check(checks.text(value))
        except AccessOptionError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def run_serve(args: argparse.Namespace) -> int:
    try:
        from chatapp.server.app import ShutdownNotice, build_app
        from chatapp.server.runner import PortUnavailable, base_url, bind, serve_forever
        from chatapp.server.security import AccessPolicy, BindRefused, check_bind
        from chatapp.server.worker import EngineWorker
    except ImportError as exc:
        raise UserError(
            f"chatapp serve needs the server extra ({exc.name} is missing): "
            "pip install 'chatapp[server]'."
        ) from None
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be from 0 to 65535 (got {args.port}).")
    if args.max_queue < 1:
        raise UserError("--max-queue must be at least 1.")
    if args.parallel is not None and args.parallel > 1 and args.mode != Mode.IOBINDING:
        raise UserError("--parallel decodes requests together on the iobinding loop only.")
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    if "*" in args.allow_origin and not api_key:
        raise UserError(
            "--allow-origin '*' lets any web page use the model: it needs an API key "
            f"(--api-key or {API_KEY_ENV})."
        )
    try:
        host = check_bind(args.host, args.port, args.allow_remote, api_key)
        sock = bind(host, args.port)
    except (BindRefused, PortUnavailable) as exc:
        raise UserError(str(exc)) from None
    try:
        if args.model is None:
            _prepare_default_model()
        engine = start_engine(args)
        if engine.tokenizer.notice:  # as `generate` and the window say it
            print(f"chatapp serve: {engine.tokenizer.notice}", file=sys.stderr)
        engine.speculative = args.speculative
        if args.speculative and (refusal := engine.speculation_refusal()):
            print(f"chatapp serve: speculative decoding is off: {refusal}.", file=sys.stderr)
        log = None if args.quiet else _log
        parallel = _slots(args, engine)
        budget = args.kv_budget
        if budget is not None and budget < engine.max_context:
            raise UserError(
                f"--kv-budget {budget} is less than one context ({engine.max_context} "
                "positions): a long request could never start."
            )
        worker = EngineWorker(
            engine,
            args.mode,
            args.served_model_name,
            args.max_queue,
            log,
            parallel=parallel,
            kv_budget=budget,
        )
    except BaseException:
        sock.close()
        raise
    try:
        # SIGTERM before uvicorn installs its own handler (a service manager may send it at
        # any time) stops the server as Ctrl+C does, rather than killing it mid-start.
        signal.signal(signal.SIGTERM, _interrupt)
        access = AccessPolicy(host, frozenset(args.allow_host), frozenset(args.allow_origin))
        shutdown = ShutdownNotice()
        app = build_app(
            worker, api_key, access=access, aliases=tuple(args.alias), shutdown=shutdown
        )
        url = base_url(sock)
        # The address only once the socket listens: a client that reads it and connects at
        # once must be answered, not refused.
        serve_forever(
            app,
            sock,
            on_exit=shutdown.trigger,
            on_start=lambda: _announce(args, worker, url, api_key),
        )
    except KeyboardInterrupt:  # before uvicorn's handlers, or a second Ctrl+C while stopping
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sock.close()
        worker.close()
    print("chatapp serve: stopped", file=sys.stderr)
    return 0


def _slots(args: argparse.Namespace, engine: Engine) -> int:
    """--parallel, or by default 4 slots where this model and device can batch (else 1)."""
    from chatapp.engine.slots import slots_refusal

    if args.parallel is not None:
        return int(args.parallel)
    if args.mode != Mode.IOBINDING or slots_refusal(engine.info, engine.device) is not None:
        return 1
    return DEFAULT_PARALLEL


def _announce(
    args: argparse.Namespace, worker: EngineWorker, url: str, api_key: str | None
) -> None:
    card = worker.card
    if args.json:
        print(json.dumps({"url": f"{url}/v1", "model": card.id, "device": card.device}))
    else:
        print(
            f"chatapp serve: {card.id} on {card.device_label} ({args.mode} loop by default"
            f"{f', {card.parallel} requests together' if card.parallel > 1 else ''}) at "
            f"{url}/v1{' with an API key' if api_key else ''}; Ctrl+C stops",
            file=sys.stderr,
        )
    sys.stdout.flush()


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _prepare_default_model() -> None:
    """On first use the default model is converted, as the window does (once, offline)."""
    from chatapp.cli.progress import ProgressBar
    from chatapp.convert.default_model import default_model_dir, prepare_default_model

    if (default_model_dir() / "model.onnx").is_file():
        return  # prepared: the engine checks the folder as it loads it
    print("chatapp serve: preparing the default model (once)", file=sys.stderr, flush=True)
    bar = ProgressBar("prepare")
    try:
        prepare_default_model(bar)
    finally:
        bar.close()


def _log(line: str) -> None:
    print(f"chatapp serve: {line}", file=sys.stderr, flush=True)
