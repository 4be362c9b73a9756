"""`chatapp serve`: the model behind an OpenAI-compatible API (docs/server.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from chatapp.cli.engine_cmds import add_model_args, start_engine
from chatapp.cli.errors import UserError
from chatapp.engine.modes import MODES, Mode
from chatapp.session import arg_checks as checks

API_KEY_ENV = "CHATAPP_API_KEY"


def add_parsers(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve the model over an OpenAI-compatible HTTP API (127.0.0.1 by default)",
        description="OpenAI-compatible /v1/chat/completions, /v1/completions and /v1/models. "
        "One request generates at a time; the others wait their turn.",
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
        "--max-queue", type=int, default=16, help="requests waiting at once before 503"
    )
    serve.add_argument("--quiet", action="store_true", help="no per-request log lines")
    serve.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    try:
        from chatapp.server.app import build_app
        from chatapp.server.runner import PortUnavailable, base_url, bind, serve_forever
        from chatapp.server.security import BindRefused, check_bind
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
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    try:
        host = check_bind(args.host, args.port, args.allow_remote, api_key)
        sock = bind(host, args.port)
    except (BindRefused, PortUnavailable) as exc:
        raise UserError(str(exc)) from None
    try:
        engine = start_engine(args)
    except BaseException:
        sock.close()
        raise
    log = None if args.quiet else _log
    worker = EngineWorker(engine, args.mode, args.served_model_name, args.max_queue, log)
    url = base_url(sock)
    card = worker.card
    if args.json:
        print(json.dumps({"url": f"{url}/v1", "model": card.id, "device": card.device}))
    else:
        print(
            f"chatapp serve: {card.id} on {card.device_label} ({args.mode} loop by default) at "
            f"{url}/v1{' with an API key' if api_key else ''}; Ctrl+C stops",
            file=sys.stderr,
        )
    sys.stdout.flush()
    try:
        serve_forever(build_app(worker, api_key), sock)
    except KeyboardInterrupt:  # uvicorn shuts down first, then passes Ctrl+C on
        pass
    finally:
        worker.close()
    print("chatapp serve: stopped", file=sys.stderr)
    return 0


def _log(line: str) -> None:
    print(f"chatapp serve: {line}", file=sys.stderr, flush=True)
