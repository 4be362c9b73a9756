"""The transcript's document: it never loads what a message points at, and only the app's own
links carry its actions.

Images. Qt's QTextDocument loads an image's URL when it lays the image out: it reads local
files whole (`![x](file:///dev/zero)` ended in std::bad_alloc, an image naming a named pipe
hung the window, a 2 GB file was read), resolves relative paths against the working folder and
decodes data: URLs. Returning nothing from `loadResource` is not enough: Qt's image handler
then calls QImage::load(name) itself. So an image must never reach a laid-out document:
`markdown_fragment` parses the Markdown into a scratch document that has no layout (nothing
is loaded while it has none), turns every image into its alt text there ("[image: a duck]",
`replace_images`) and only then hands the result over. `SafeDocument.loadResource` refusing
every URL is a second line. Nothing in a message reaches the file system or the network.

Text from outside (a chat's title, a file name in an error) shown in a tooltip or a label is
plain text (`plain_tip`): Qt would take "<img src=...>" in it as rich text and load it.

Links. A message's links are only followed if they are web links (http, https), and only
after the user confirms (chat/view.py). The app's own actions (Copy, Edit, a code block's
Copy, ‹ › between versions, Show all) are links too, but with a scheme and a key that a
message cannot know: `ActionLinks` makes a random key per transcript, so `edit:0` or any
other href written in a message is just a link that does nothing.
"""

from __future__ import annotations

import hmac
import html
import secrets
from dataclasses import dataclass

from PySide6.QtCore import QObject, QUrl
from PySide6.QtGui import (
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextDocumentFragment,
    QTextFormat,
)

ACTION_SCHEME = "chatapp-action"
WEB_SCHEMES = ("http", "https")
ALT_TEXT_CHARS = 200  # of an image's description, in the transcript


class SafeDocument(QTextDocument):
    """A QTextDocument that loads no resource, whatever its URL."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.refused_loads = 0  # how many times layout asked (tests check it is asked)

    def loadResource(self, _type: int, _name: QUrl | str) -> object:
        self.refused_loads += 1
        return None


def markdown_fragment(
    markdown: str, features: QTextDocument.MarkdownFeature, alt_format: QTextCharFormat
) -> tuple[QTextDocumentFragment, QTextBlockFormat]:
    """`markdown` as rich text without a single image: each is its alt text in `alt_format`.
    (QTextCursor.insertMarkdown would insert the images into the laid-out document.) Also
    the format of its first block: inserting a fragment keeps the format of the block it goes
    into, so a message that starts with a code block needs it set there first."""
    scratch = QTextDocument()  # never laid out: documentLayout() is never asked for
    QTextCursor(scratch).insertMarkdown(markdown, features)
    # The walk over every fragment costs ~10 ms per 16 KB: skip it when the document's few
    # distinct formats include no image (one call).
    if any(f.isImageFormat() for f in scratch.allFormats()):
        replace_images(scratch, 0, alt_format)
    return QTextDocumentFragment(scratch), scratch.begin().blockFormat()


def plain_tip(text: str) -> str:
    """`text` for a tooltip or a message box's rich-text field, shown exactly as written."""
    escaped = html.escape(text, quote=False).replace("\n", "<br>")
    return f"<qt>{escaped}</qt>"


@dataclass(frozen=True)
class _Image:
    position: int
    length: int
    alt: str
    name: str  # its URL


def replace_images(document: QTextDocument, start: int, format_: QTextCharFormat) -> int:
    """Replace every image from `start` to the end with "[image: alt text]" in `format_`;
    returns how many. (Qt splits an alt text with Markdown in it over several image objects
    with the same URL: those become one.)"""
    images: list[_Image] = []
    block = document.findBlock(start)
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.position() + fragment.length() > start:
                char = fragment.charFormat()
                if char.isImageFormat():
                    alt = str(char.property(QTextFormat.Property.ImageAltText) or "")
                    name = char.toImageFormat().name()
                    at, length = fragment.position(), fragment.length()
                    last = images[-1] if images else None
                    if last is not None and last.position + last.length == at and last.name == name:
                        images[-1] = _Image(
                            last.position, last.length + length, last.alt + alt, name
                        )
                    else:
                        images.append(_Image(at, length, alt, name))
            it += 1
        block = block.next()
    cursor = QTextCursor(document)
    for image in reversed(images):  # from the end: earlier positions stay valid
        cursor.setPosition(image.position)
        cursor.setPosition(image.position + image.length, QTextCursor.MoveMode.KeepAnchor)
        cursor.insertText(_describe(image.alt), format_)
    return len(images)


def _describe(alt: str) -> str:
    alt = " ".join(alt.split())
    if len(alt) > ALT_TEXT_CHARS:
        alt = alt[: ALT_TEXT_CHARS - 1] + "…"
    return f"[image: {alt}]" if alt else "[image]"


def is_web_link(url: QUrl) -> bool:
    return url.isValid() and url.scheme().lower() in WEB_SCHEMES and bool(url.host())


class ActionLinks:
    """Hrefs for the app's own actions, unforgeable by message text: the scheme is ours and
    each transcript has its own random key."""

    def __init__(self, key: str | None = None) -> None:
        self.key = key or secrets.token_hex(16)

    def href(self, verb: str, *numbers: int) -> str:
        return f"{ACTION_SCHEME}:{self.key}/{verb}" + "".join(f"/{n}" for n in numbers)

    def parse(self, url: QUrl) -> tuple[str, tuple[int, ...]] | None:
        """(verb, numbers) of one of our hrefs; None for anything else."""
        if url.scheme() != ACTION_SCHEME:
            return None
        key, _, rest = url.path().partition("/")
        if not hmac.compare_digest(key.encode(), self.key.encode()):
            return None
        verb, *numbers = rest.split("/")
        try:
            return verb, tuple(int(n) for n in numbers)
        except ValueError:
            return None
