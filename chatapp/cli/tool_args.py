"""`chatapp generate --tools FILE --tool-choice CHOICE`: the tools a prompt may call, and the
calls printed (session/tool_specs.py reads the file as `chatapp serve` reads a request)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chatapp.cli.errors import UserError
from chatapp.engine.structured.tool_calls import NO_TOOLS, Tool, ToolChoice, pretty_arguments
from chatapp.engine.text.chat import ToolCall
from chatapp.session import arg_checks as checks
from chatapp.session.tool_specs import ToolSpecError, choice_by_word, tools_from_file


def add_tool_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--tools",
        type=Path,
        default=None,
        metavar="FILE",
        help="a JSON file of tools the model may call: OpenAI's `tools` list, or a list of "
        "function objects (name, description, parameters)",
    )
    p.add_argument(
        "--tool-choice",
        type=checks.text,
        default=None,
        metavar="CHOICE",
        help="auto (default with --tools), required, none, or a tool's name",
    )


def tools_from_args(args: argparse.Namespace) -> tuple[tuple[Tool, ...], ToolChoice]:
    """The tools and the choice, or a UserError in one line."""
    path: Path | None = args.tools
    if path is None:
        if args.tool_choice is not None:
            raise UserError("--tool-choice needs --tools FILE.")
        return (), NO_TOOLS
    if args.raw:
        raise UserError("--tools works with the chat template; --raw continues plain text.")
    try:
        tools = tools_from_file(path)
        return tools, choice_by_word(args.tool_choice or "auto", tools)
    except ToolSpecError as exc:
        flag = "--tool-choice" if exc.where == "tool_choice" else "--tools"
        raise UserError(f"{flag}: {exc.message}") from exc


def calls_as_json(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """As OpenAI's `tool_calls` (arguments are JSON text)."""
    return [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
        for c in calls
    ]


def calls_text(calls: Sequence[ToolCall]) -> str:
    """Each call as `tool call: NAME` and its arguments, indented JSON."""
    blocks = []
    for call in calls:
        blocks.append(f"tool call: {call.name}\n{pretty_arguments(call.arguments)}")
    return "\n".join(blocks)
