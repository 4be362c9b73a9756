"""`chatapp [COMMAND]`: parse the command line, run a subcommand or start the desktop app."""

from __future__ import annotations

import argparse
import os
import sys

from chatapp import __version__
from chatapp.cli import convert_cmds, engine_cmds, hub_cmds, server_cmds
from chatapp.cli.errors import Terminated, UserError
from chatapp.convert.errors import ConversionError
from chatapp.engine.devices import DeviceError
from chatapp.engine.errors import EngineError
from chatapp.engine.mapped_weights import install_signal
from chatapp.session.arg_checks import OneLineParser, printable, safe_output_streams


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="chatapp",
        description="Chat with small local language models on ONNX Runtime.",
    )
    parser.add_argument("--version", action="version", version=f"chatapp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    convert_cmds.add_parsers(sub)
    engine_cmds.add_parsers(sub)
    server_cmds.add_parsers(sub)
    hub_cmds.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # transformers warns on import that torch is missing; chatapp only uses its tokenizers,
    # and the warning would break the one-line error output.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    args_list = sys.argv[1:] if argv is None else argv
    install_signal()  # before any model maps its weights: their leases' signal (mapped_weights.py)
    parser = build_parser()
    if _starts_gui(parser, args_list):
        from chatapp.gui import run_app  # Qt is imported only for the GUI

        return run_app(args_list)
    safe_output_streams()
    args = parser.parse_args(args_list)
    try:
        return int(args.func(args) or 0)
    except (ConversionError, EngineError, DeviceError, UserError) as exc:
        print(f"chatapp: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except Terminated:  # SIGTERM, after the same clean-up as Ctrl+C
        print("chatapp: terminated", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("chatapp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `chatapp ... | head`: the reader left; nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except MemoryError:
        print("chatapp: error: not enough memory for this.", file=sys.stderr)
        return 1
    except Exception as exc:  # a bug: still one line, with a way to see the details
        if os.environ.get("CHATAPP_DEBUG"):
            raise
        print(
            f"chatapp: error: unexpected {type(exc).__name__}: {_one_line(exc)} "
            "(a bug; CHATAPP_DEBUG=1 shows where)",
            file=sys.stderr,
        )
        return 1


def _one_line(exc: BaseException) -> str:
    return printable(str(exc)) or type(exc).__name__


def _starts_gui(parser: argparse.ArgumentParser, args_list: list[str]) -> bool:
    """No subcommand named: the desktop app, with `[--model DIR] [--device NAME] [--mode M]`.

    Decided before argparse sees the GUI's options: `parse_known_args` would take the value
    of `--model DIR` for a (misspelt) subcommand. `-h` and `--version` stay with this parser.
    """
    commands: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands.update(action.choices)
    if any(a in ("-h", "--help", "--version") for a in args_list):
        return False
    return not any(a in commands for a in args_list)
