"""Hostile content in the transcript (issue 12): nothing a message names is ever loaded, only
web links open (after the user saw the URL and said yes), and a message cannot trigger the
app's own actions."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QColor, QImage, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat
from PySide6.QtWidgets import QTextBrowser

from chatapp.gui.chat.safe_document import (
    ActionLinks,
    SafeDocument,
    is_web_link,
    markdown_fragment,
    plain_tip,
)
from chatapp.gui.chat.view import ChatView
from chatapp.gui.common.qtcompat import emit
from chatapp.session.conversation import ChatMessage

HOSTILE_IMAGES = [
    "file:///dev/zero",
    "/dev/urandom",
    "file:///etc/passwd",
    "/etc/passwd",
    "../../../../etc/passwd",
    "http://127.0.0.1:9/x.png",
    "https://example.invalid/tracker.gif",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
    "qrc:/qt-project.org/styles/commonstyle/images/standardbutton-open-16.png",
    ":/qt-project.org/styles/commonstyle/images/standardbutton-open-16.png",
]


def images_in(document: QTextDocument) -> list[str]:
    names = []
    block = document.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isImageFormat():
                names.append(fmt.toImageFormat().name())
            it += 1
        block = block.next()
    return names


def test_images_never_reach_a_laid_out_document(qtbot, tmp_path: Path) -> None:
    """Why markdown_fragment exists: with insertMarkdown, Qt's image handler reads the file
    itself (QImage::load) even though loadResource refuses. Shown with a harmless PNG."""
    png = tmp_path / "real.png"
    image = QImage(4, 4, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    assert image.save(str(png))
    markdown = f"see ![a real image]({png}) here"

    def browser() -> tuple[QTextBrowser, SafeDocument]:
        widget = QTextBrowser()
        qtbot.addWidget(widget)
        document = SafeDocument(widget)
        widget.setDocument(document)
        widget.show()
        return widget, document

    naive, naive_doc = browser()
    QTextCursor(naive_doc).insertMarkdown(markdown)
    naive.grab()
    assert naive_doc.resource(QTextDocument.ResourceType.ImageResource, QUrl(str(png)))

    safe, safe_doc = browser()
    QTextCursor(safe_doc).insertFragment(
        markdown_fragment(
            markdown, QTextDocument.MarkdownFeature.MarkdownDialectGitHub, QTextCharFormat()
        )[0]
    )
    safe.grab()
    assert not safe_doc.resource(QTextDocument.ResourceType.ImageResource, QUrl(str(png)))
    assert safe_doc.toPlainText() == "see [image: a real image] here"
    assert images_in(safe_doc) == []


def test_plain_tip_shows_markup_as_text() -> None:
    tip = plain_tip("<img src='/dev/zero'> & co\nline 2")
    assert tip == "<qt>&lt;img src='/dev/zero'&gt; &amp; co<br>line 2</qt>"


@pytest.mark.parametrize("url", HOSTILE_IMAGES)
def test_markdown_images_become_their_alt_text(qtbot, view: ChatView, url: str) -> None:
    answer = f"Look: ![a *duck*]({url}) and ![]({url})\n\n> ![quoted]({url})"
    view.show_messages([ChatMessage("user", f"![mine]({url})"), ChatMessage("assistant", answer)])
    view.flush()
    document = view.transcript.document()
    assert images_in(document) == []
    text = view.transcript.toPlainText()
    # (Qt's importer drops an image without alt text altogether.)
    assert "[image: a duck]" in text and "[image: quoted]" in text
    assert f"![mine]({url})" in text  # what the user typed is shown as typed
    view.transcript.grab()  # a real paint: nothing left to load


def test_streamed_and_imported_images_are_not_loaded(qtbot, view: ChatView) -> None:
    view.show_messages([ChatMessage("user", "hi")])
    view.begin_answer()
    view.append_answer("partial ![x](file:///dev/zero) and ![y](/dev/urandom)")
    view.flush()
    assert images_in(view.transcript.document()) == []
    assert "[image: x]" in view.transcript.toPlainText()


def test_an_image_naming_a_named_pipe_is_never_opened(qtbot, view: ChatView, tmp_path) -> None:
    """A FIFO blocks whoever opens it for reading until a writer comes: if the transcript
    opened it, our writer's open() would return."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until someone opens the pipe to read
        opened.set()
        os.close(fd)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        for url in (str(fifo), QUrl.fromLocalFile(str(fifo)).toString(), fifo.name):
            answer = f"![pipe]({url})\n\n<img src='{url}'>"
            view.show_messages([ChatMessage("user", "q"), ChatMessage("assistant", answer)])
            view.flush()
            view.transcript.grab()
            qtbot.wait(50)
        assert not opened.is_set()
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer go
        thread.join(5)
        os.close(fd)
    assert opened.is_set()  # the check above could have seen an open


@pytest.mark.parametrize(
    "href",
    [
        "file:///etc/passwd",
        "/etc/passwd",
        "javascript:alert(1)",
        "smb://host/share",
        "edit:0",
        "copy:0",
        "chatapp-action:0/edit/0",
        "http://",  # no host
    ],
)
def test_links_other_than_web_links_never_open(qtbot, view: ChatView, href: str) -> None:
    view.show_messages([ChatMessage("user", "q"), ChatMessage("assistant", f"[click]({href})")])
    asked: list[QUrl] = []
    opened: list[QUrl] = []
    view.confirm_link = lambda url: asked.append(url) or True
    view.open_url = lambda url: opened.append(url) or True
    with (
        qtbot.assertNotEmitted(view.sig_edit_submitted),
        qtbot.assertNotEmitted(view.transcript.sig_edit_requested),
        qtbot.assertNotEmitted(view.transcript.sig_copy_requested),
        qtbot.waitSignal(view.sig_status, timeout=1000) as status,
    ):
        emit(view.transcript.anchorClicked, QUrl(href))
    assert asked == [] and opened == [] and view.editing is None
    assert status.args[0].startswith("Not opened: only web links")


def test_web_links_open_only_after_the_user_saw_the_url(qtbot, view: ChatView) -> None:
    url = QUrl("https://example.org/a?b=c")
    asked: list[str] = []
    opened: list[QUrl] = []
    view.open_url = lambda u: opened.append(u) or True
    view.confirm_link = lambda u: asked.append(u.toString()) or False  # the user says no
    emit(view.transcript.anchorClicked, url)
    assert asked == ["https://example.org/a?b=c"] and opened == []
    view.confirm_link = lambda u: asked.append(u.toString()) or True
    emit(view.transcript.anchorClicked, url)
    assert opened == [url]
    # Hovering shows where a link goes, whatever its text says.
    with qtbot.waitSignal(view.sig_status, timeout=1000) as status:
        emit(view.transcript.highlighted, QUrl("https://evil.example/" + "x" * 1000))
    assert status.args[0].startswith("https://evil.example/") and len(status.args[0]) <= 300


def test_action_links_cannot_be_forged() -> None:
    links = ActionLinks()
    other = ActionLinks()
    assert links.parse(QUrl(links.href("edit", 3))) == ("edit", (3,))
    assert links.parse(QUrl(other.href("edit", 3))) is None  # another key
    assert links.parse(QUrl("edit:3")) is None
    assert links.parse(QUrl(f"chatapp-action:{links.key}/edit/x")) is None
    assert not is_web_link(QUrl("file:///etc/passwd")) and is_web_link(QUrl("http://a.b/"))


def test_a_message_naming_the_real_action_scheme_does_nothing(qtbot, view: ChatView) -> None:
    """Even a link with our scheme (a message cannot know the key) is only a refused link."""
    view.show_messages(
        [ChatMessage("user", "q"), ChatMessage("assistant", "[x](chatapp-action:k/edit/0)")]
    )
    view.flush()
    anchors = []
    block = view.transcript.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fmt = it.fragment().charFormat()
            if fmt.isAnchor() and fmt.anchorHref().startswith("chatapp-action:k/"):
                anchors.append(fmt.anchorHref())
            it += 1
        block = block.next()
    assert anchors == ["chatapp-action:k/edit/0"]
    with qtbot.assertNotEmitted(view.transcript.sig_edit_requested):
        emit(view.transcript.anchorClicked, QUrl(anchors[0]))
    assert view.editing is None
    assert QTextFormat.Property.ImageName  # (keeps the import honest for type checkers)


def test_raw_html_in_messages_is_text(view: ChatView, tmp_path: Path) -> None:
    target = tmp_path / "secret.txt"
    target.write_text("TOP SECRET")
    answer = f"<img src='{target}'><iframe src='file://{target}'></iframe><b>bold?</b>"
    view.show_messages([ChatMessage("user", "q"), ChatMessage("assistant", answer)])
    view.flush()
    text = view.transcript.toPlainText()
    assert "<b>bold?</b>" in text and "TOP SECRET" not in text
