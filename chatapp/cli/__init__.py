"""The command line: no subcommand starts the desktop app."""

from __future__ import annotations

import argparse
import sys

from chatapp import __version__
from chatapp.convert.errors import ConversionError


class UserError(Exception):
    """Something the user can fix; printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    from chatapp.cli import convert_cmds

    parser = argparse.ArgumentParser(
        prog="chatapp",
        description="Chat with small local language models on ONNX Runtime.",
    )
    parser.add_argument("--version", action="version", version=f"chatapp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    convert_cmds.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args_list = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args, _rest = parser.parse_known_args(args_list)
    if args.command is None:
        print("GUI arrives with the desktop-app issue.")
        return 0
    args = parser.parse_args(args_list)
    try:
        return int(args.func(args) or 0)
    except (ConversionError, UserError) as exc:
        print(f"chatapp: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("chatapp: interrupted", file=sys.stderr)
        return 130
