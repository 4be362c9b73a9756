"""Code blocks in a drawn answer: a background from the palette, a "Copy" link that copies
exactly the code, and syntax highlighting that stays within a time budget.

Exact code: Qt's Markdown importer turns tabs into spaces, so the text to copy is taken from
the Markdown source (markdown-it-py finds fenced and indented code blocks, in lists and quotes
too, as CommonMark says) and matched to the drawn blocks line by line; where the two disagree
the drawn text is copied. Highlighting: Pygments (only its own lexers, never a plugin; it
reads no file), for the language the fence names (no guessing: guessing runs every lexer), at
most `HIGHLIGHT_MAX_CHARS` per block (8 KB of Python lexes in ~40 ms here; a lexer's first
use also compiles its rules, ~50-90 ms once per language) and, as a safety net for a lexer
that is slow on some text, `HIGHLIGHT_BUDGET_S` per message; what does not fit stays plain.
"""

from __future__ import annotations

import functools
import itertools
import time
from dataclasses import dataclass

from markdown_it import MarkdownIt
from pygments.lexer import Lexer
from pygments.lexers import find_lexer_class, get_all_lexers
from pygments.token import _TokenType
from pygments.util import ClassNotFound
from PySide6.QtGui import (
    QFont,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)

from chatapp.gui.chat.colors import TranscriptColors
from chatapp.gui.chat.safe_document import ActionLinks

HIGHLIGHT_MAX_CHARS = 6_000
HIGHLIGHT_BUDGET_S = 0.04
LANGUAGE_MAX_CHARS = 40

_parser = MarkdownIt("commonmark", {"html": False})


@dataclass(frozen=True)
class SourceBlock:
    language: str
    code: str  # exactly as written, ending without the last line break


@dataclass
class CodeGroup:
    blocks: list[QTextBlock]
    language: str
    code: str  # what Copy copies


def source_blocks(markdown: str) -> list[SourceBlock]:
    """Fenced and indented code blocks of `markdown`, in order."""
    found = []
    for token in _parser.parse(markdown):
        if token.type in ("fence", "code_block"):
            words = token.info.split() if token.type == "fence" else []
            code = token.content[:-1] if token.content.endswith("\n") else token.content
            found.append(SourceBlock(words[0] if words else "", code))
    return found


def is_code(block: QTextBlock) -> bool:
    fmt = block.blockFormat()
    # Qt marks a fenced block with all three, an indented one only with a (blank) language.
    return (
        fmt.nonBreakableLines()
        or fmt.hasProperty(QTextFormat.Property.BlockCodeFence)
        or fmt.hasProperty(QTextFormat.Property.BlockCodeLanguage)
    )


def code_groups(document: QTextDocument, start: int, markdown: str) -> list[CodeGroup]:
    """The drawn code blocks from `start` on, each with the exact code to copy."""
    drawn: list[QTextBlock] = []
    block = document.findBlock(start)
    while block.isValid():
        if is_code(block):
            drawn.append(block)
        block = block.next()
    if not drawn:
        return []
    groups: list[CodeGroup] = []
    at = 0
    for source in source_blocks(markdown):
        lines = source.code.split("\n") if source.code else []
        taken = drawn[at : at + len(lines)]
        if not lines:
            continue
        if len(taken) < len(lines) or not _same_lines(taken, lines) or not _adjacent(taken):
            break  # the two parsers disagree from here on: copy what is drawn
        groups.append(CodeGroup(taken, source.language, source.code))
        at += len(lines)
    for run in _runs(drawn[at:]):
        language = run[0].blockFormat().stringProperty(QTextFormat.Property.BlockCodeLanguage)
        groups.append(CodeGroup(run, language, "\n".join(b.text() for b in run)))
    return groups


def _same_lines(blocks: list[QTextBlock], lines: list[str]) -> bool:
    return all(
        "".join(b.text().split()) == "".join(line.split())
        for b, line in zip(blocks, lines, strict=False)
    )


def _adjacent(blocks: list[QTextBlock]) -> bool:
    return all(a.next() == b for a, b in itertools.pairwise(blocks))


def _runs(blocks: list[QTextBlock]) -> list[list[QTextBlock]]:
    runs: list[list[QTextBlock]] = []
    for block in blocks:
        if runs and runs[-1][-1].next() == block:
            runs[-1].append(block)
        else:
            runs.append([block])
    return runs


def decorate(
    document: QTextDocument,
    start: int,
    markdown: str,
    colors: TranscriptColors,
    links: ActionLinks,
    message_index: int,
) -> list[CodeGroup]:
    """Background, highlighting and a "Copy" line above each code block drawn from `start`;
    returns the groups (the Copy links name them by number)."""
    groups = code_groups(document, start, markdown)
    lexers = [lexer_for(g.language) for g in groups]  # a lexer's first use compiles its rules
    deadline = time.perf_counter() + HIGHLIGHT_BUDGET_S
    cursor = QTextCursor(document)
    cursor.beginEditBlock()  # one layout pass for all the formats (30 ms, not 450, for 1 300)
    try:
        for group, lexer in zip(groups, lexers, strict=True):
            for block in group.blocks:
                fmt = block.blockFormat()
                fmt.setBackground(colors.code_background)
                QTextCursor(block).setBlockFormat(fmt)
            if lexer is not None:
                highlight(document, group, lexer, colors, deadline)
        for number in range(len(groups) - 1, -1, -1):  # from the end: positions stay valid
            _insert_label(groups[number], colors, links.href("code", message_index, number))
    finally:
        cursor.endEditBlock()
    return groups


def _insert_label(group: CodeGroup, colors: TranscriptColors, href: str) -> None:
    first = group.blocks[0]
    QTextCursor(first).insertBlock(first.blockFormat(), first.charFormat())
    # `first` now names the empty block before the code: it becomes the label.
    label = QTextBlockFormat()
    label.setTopMargin(6)
    cursor = QTextCursor(first)
    cursor.setBlockFormat(label)
    muted = QTextCharFormat()
    muted.setForeground(colors.muted)
    muted.setFontFamilies(["sans-serif"])
    language = group.language[:LANGUAGE_MAX_CHARS]
    if language:
        cursor.insertText(f"{language}   ", muted)
    link = QTextCharFormat(muted)
    link.setAnchor(True)
    link.setAnchorHref(href)
    link.setFontUnderline(False)
    link.setFontWeight(QFont.Weight.DemiBold)
    link.setToolTip("Copy this code")
    cursor.insertText("Copy", link)


@functools.cache
def _builtin_lexers() -> dict[str, str]:
    """Alias -> name of the lexers that ship with Pygments. Only these are used: a fence's
    language comes from the model or an imported chat, and must not choose a plugin that some
    other installed package registered (get_lexer_by_name would import and run those)."""
    names: dict[str, str] = {}
    for name, aliases, _files, _mimes in get_all_lexers(plugins=False):
        for alias in aliases:
            names.setdefault(alias.lower(), name)
    return names


def lexer_for(language: str) -> Lexer | None:
    if not language or len(language) > LANGUAGE_MAX_CHARS:
        return None
    name = _builtin_lexers().get(language.lower())
    if name is None:
        return None
    try:
        lexer_class = find_lexer_class(name)  # a built-in name: found before any plugin
    except ClassNotFound:
        return None
    return lexer_class(stripnl=False, ensurenl=False) if lexer_class is not None else None


def highlight(
    document: QTextDocument,
    group: CodeGroup,
    lexer: Lexer,
    colors: TranscriptColors,
    deadline: float,
) -> int:
    """Colour the tokens of one code group until `deadline` (a safety net: the size limit
    keeps ordinary code well inside it); returns how many tokens got a colour."""
    text = "\n".join(b.text() for b in group.blocks)
    if len(text) > HIGHLIGHT_MAX_CHARS or time.perf_counter() > deadline:
        return 0
    origin = group.blocks[0].position()
    cursor = QTextCursor(document)
    formats: dict[str, QTextCharFormat] = {}
    coloured = 0
    for offset, kind, value in lexer.get_tokens_unprocessed(text):
        if time.perf_counter() > deadline:
            break
        name = _colour_name(kind, colors)
        if name is None or not value.strip():
            continue
        fmt = formats.get(name)
        if fmt is None:
            fmt = formats[name] = QTextCharFormat()
            fmt.setForeground(colors.syntax[name])
            if name == "Comment":
                fmt.setFontItalic(True)
        cursor.setPosition(origin + offset)
        cursor.setPosition(origin + offset + len(value), QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(fmt)
        coloured += 1
    return coloured


def _colour_name(kind: _TokenType, colors: TranscriptColors) -> str | None:
    """The most specific entry of `colors.syntax` for a Pygments token type."""
    while kind.parent is not None:
        name = ".".join(kind)
        if name in colors.syntax:
            return name
        kind = kind.parent
    return None
