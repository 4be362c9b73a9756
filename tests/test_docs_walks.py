"""docs/architecture.md's walks (one answer in the window, one request to `chatapp serve`,
opening a model) name code that exists: a renamed function or class fails here, not in a
reader's search."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WALKS = ("One answer", "One request", "Opening a model")
# `Name`, `Name.member`, `function(...)` or `_private` in backticks; lower-case dotted names
# (`asyncio.Queue`, `loop.call_soon_threadsafe`) are the standard library's, not ours.
CODE = re.compile(r"`([A-Za-z_][\w.]*)(\([^`]*\))?`")


@cache
def known() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """Every name chatapp defines, assigns, takes or spells as a string; each class's members."""
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for path in (ROOT / "chatapp").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            if isinstance(node, ast.ClassDef):
                own = members.setdefault(node.name, set())
                for item in ast.walk(node):
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                        own.add(item.name)
                    elif isinstance(item, ast.Name | ast.arg):
                        own.add(item.id if isinstance(item, ast.Name) else item.arg)
                    elif isinstance(item, ast.Attribute):
                        own.add(item.attr)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and str(node.value).isidentifier():
                names.add(str(node.value))
    return frozenset(names), {k: frozenset(v) for k, v in members.items()}


def walk_names() -> list[str]:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    sections = [s for s in re.split(r"^## ", doc, flags=re.M) if s.startswith(WALKS)]
    assert len(sections) == len(WALKS), "a walk's heading changed: update WALKS"
    return [m.group(1) for s in sections for m in CODE.finditer(s)]


def missing(names: list[str]) -> list[str]:
    defined, members = known()
    gone = []
    for name in names:
        head, _, member = name.partition(".")
        if head[0].isupper():
            no_class = head not in members and head not in defined
            no_member = bool(member) and "." not in member
            no_member = no_member and member not in members.get(head, defined)
            if no_class or no_member:
                gone.append(name)
        elif not member and name not in defined:
            gone.append(name)
    return gone


def test_the_walks_name_code_that_exists() -> None:
    names = walk_names()
    assert len(names) > 40  # the walks are read, not skipped
    assert missing(names) == []


def test_a_renamed_function_is_caught() -> None:
    assert missing(["Chat.no_such_method", "NoSuchClass", "no_such_function"]) == [
        "Chat.no_such_method",
        "NoSuchClass",
        "no_such_function",
    ]
    assert missing(["Chat.send", "generate_job", "asyncio.Queue"]) == []
