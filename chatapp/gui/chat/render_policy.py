"""How much of a message the transcript draws, and how: decided on the text, before Qt sees it.

Qt lays out a QTextDocument on the GUI thread, and some text costs far more than its size
suggests. Measured with QTextBrowser (offscreen, 2 cores under load 3-4):

| text | insert + layout |
|---|---|
| 16 KB of ordinary Markdown (paragraphs, lists, code) | 36 ms |
| 64 KB of the same | 130 ms |
| a 10 000-character line without a space | 16 ms |
| a 20 000-character line without a space | 65 ms (a line's layout grows with its square) |
| a 100 000-character line without a space | 1.9 s, as plain text too |
| a Markdown table of 500 cells | 70 ms, and 20 ms more at every repaint |
| a Markdown table of 2 000 cells | 330 ms |
| 3 000 one-line headings (12 KB) | 58 ms |

So a message is drawn as Markdown only when it is small and simple enough to stay far below
the ~100 ms a window may stall (`markdown_problem` says why not otherwise); anything else is
plain text, and plain text longer than a screenful of screenfuls is elided in the middle
(`RenderPlan.hidden`), with "Show all" opening the whole message in a viewer. No Qt here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARKDOWN_MAX_CHARS = 16_000
MARKDOWN_MAX_LINES = 1_000
MARKDOWN_MAX_PIPES = 300  # table cells cost ~0.15 ms each, and again at every repaint
MARKDOWN_MAX_RUN = 2_000  # characters without a space, where a line cannot wrap
MARKDOWN_MAX_DEPTH = 16  # quote markers or list indents at the start of a line
PLAIN_HEAD_CHARS = 12_000  # what an elided message shows of its beginning
PLAIN_TAIL_CHARS = 2_000  # and of its end
PLAIN_HEAD_LINES = 600  # lines are blocks: 1 000 short ones cost about as much as 12 KB
PLAIN_TAIL_LINES = 100

_LONG_RUN = re.compile(rf"\S{{{MARKDOWN_MAX_RUN + 1},}}")
# Container markers at the start of a line, each followed by its own space (one way to
# match a line: no backtracking blow-up on a line that almost qualifies).
_DEEP = re.compile(
    rf"^[ \t]*(?:(?:>|[-*+][ \t]|\d{{1,9}}[.)][ \t])[ \t]*){{{MARKDOWN_MAX_DEPTH + 1},}}", re.M
)


@dataclass(frozen=True)
class RenderPlan:
    markdown: bool  # draw `head` as Markdown (else: as plain text)
    head: str  # the text drawn; all of it unless something is hidden
    tail: str = ""  # drawn after the "… N characters not shown …" line
    hidden: int = 0  # characters left out between head and tail
    reason: str = ""  # why a Markdown message is drawn as plain text ("" otherwise)

    @property
    def elided(self) -> bool:
        return self.hidden > 0


def markdown_problem(text: str) -> str:
    """Why `text` must not be drawn as Markdown ("" when it may), in words for a tooltip."""
    if len(text) > MARKDOWN_MAX_CHARS:
        return f"it is longer than {MARKDOWN_MAX_CHARS:,} characters".replace(",", " ")
    if text.count("\n") >= MARKDOWN_MAX_LINES:
        return f"it has more than {MARKDOWN_MAX_LINES:,} lines".replace(",", " ")
    if text.count("|") > MARKDOWN_MAX_PIPES:
        return "its tables are too large to draw quickly"
    if _LONG_RUN.search(text):
        return (
            f"it has a line of more than {MARKDOWN_MAX_RUN:,} characters without a space".replace(
                ",", " "
            )
        )
    if _DEEP.search(text):
        return "its quotes or lists are nested too deeply"
    return ""


def plan(text: str, markdown: bool, show_all: bool = False) -> RenderPlan:
    """How to draw `text`: as Markdown if asked and harmless, otherwise as plain text, elided
    when long unless `show_all` (the viewer, not the transcript, shows a message in full)."""
    reason = markdown_problem(text) if markdown else ""
    if markdown and not reason:
        return RenderPlan(True, text)
    short = len(text) <= PLAIN_HEAD_CHARS + PLAIN_TAIL_CHARS
    if show_all or (short and text.count("\n") < PLAIN_HEAD_LINES + PLAIN_TAIL_LINES):
        return RenderPlan(False, text, reason=reason)
    head = _head(text)
    tail = _tail(text[len(head) :])
    hidden = len(text) - len(head) - len(tail)
    if hidden <= 0:
        return RenderPlan(False, text, reason=reason)
    return RenderPlan(False, head, tail, hidden, reason)


def _head(text: str) -> str:
    head = text[:PLAIN_HEAD_CHARS]
    cut = _nth(head, "\n", PLAIN_HEAD_LINES)
    if cut >= 0:
        head = head[:cut]
    if len(head) < len(text):  # end at a line break if there is one not too far back
        newline = head.rfind("\n", len(head) // 2)
        head = head[:newline] if newline > 0 else head
    return head


def _tail(rest: str) -> str:
    tail = rest[-PLAIN_TAIL_CHARS:]
    lines = tail.split("\n")
    if len(lines) > PLAIN_TAIL_LINES:
        tail = "\n".join(lines[-PLAIN_TAIL_LINES:])
    newline = tail.find("\n", 0, len(tail) // 2)  # start at a line if there is one near
    return tail[newline + 1 :] if 0 <= newline < len(tail) - 1 else tail


def _nth(text: str, needle: str, n: int) -> int:
    """Index of the n-th occurrence of `needle` (1-based); -1 when there are fewer."""
    at = -1
    for _ in range(n):
        at = text.find(needle, at + 1)
        if at < 0:
            return -1
    return at


def describe_hidden(count: int) -> str:
    return f"… {count:,} characters not shown here …".replace(",", " ")


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
# Lines after which a break is Markdown's own: blank, a heading, a table row, a hard break.
_ENDS_BLOCK = re.compile(r"^\s*(\||#{1,6}(\s|$)|$)|\\$|  $")
# Lines that start a block of their own (a list item, heading, quote, table, fence, rule,
# a setext underline): never joined to the line before.
_STARTS_BLOCK = re.compile(
    r"^ {0,3}([-*+]([ \t]|$)|\d{1,9}[.)]([ \t]|$)|#{1,6}(\s|$)|>|\||`{3,}|~{3,}|=+\s*$|"
    r"([-*_])(\s*\5){2,}\s*$)"
)
_QUOTE = re.compile(r"^ {0,3}> ?")
LINE_BREAK = "\u2028"  # a line break inside a paragraph (Qt: the same block, no paragraph gap)


def keep_line_breaks(markdown: str) -> str:
    """`markdown` with each single line break inside a paragraph kept as a line break: a poem
    written one line per line stays so, its stanzas still paragraphs (Markdown would join the
    lines into one paragraph, as no chat reader expects). The lines are joined with U+2028,
    which Markdown reads as text and Qt draws as a new line in the same paragraph; code
    blocks, lists, headings, tables and blank lines are left alone."""
    out: list[str] = []
    fence = ""
    joinable = False  # the last line out is paragraph text the next line may continue
    for line in markdown.split("\n"):
        opened = _FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            out.append(line)
            continue
        if opened:
            fence, joinable = opened.group(1), False
            out.append(line)
            continue
        quote = _QUOTE.match(line)
        if joinable and quote and _QUOTE.match(out[-1]) and line.strip() != ">":
            out[-1] += LINE_BREAK + line[quote.end() :]  # the next line of the same quote
            continue
        if joinable and line.strip() and not _STARTS_BLOCK.match(line):
            out[-1] += LINE_BREAK + line.lstrip()
            continue
        indented_code = line.startswith(("    ", "\t")) and (not out or not out[-1].strip())
        joinable = not indented_code and not _ENDS_BLOCK.search(line)
        out.append(line)
    return "\n".join(out)
