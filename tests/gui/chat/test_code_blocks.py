"""Code blocks: Copy copies exactly the code (tabs too), highlighting colours tokens, and a
fence's language from a message never picks a plugin, reads a file or costs unbounded time."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QUrl
from PySide6.QtGui import QGuiApplication, QTextCursor

from chatapp.gui.chat import code_blocks
from chatapp.gui.chat.view import ChatView
from chatapp.gui.common.qtcompat import emit
from chatapp.session.conversation import ChatMessage

ANSWER = (
    "Two blocks:\n\n"
    "```python\ndef f(x):\n\treturn x  # tab-indented\n```\n\n"
    "Indented:\n\n"
    "    indented block\n    second line\n\n"
    "- in a list:\n\n"
    "  ```sh\n  echo 'hi'\n  ```\n"
)


def test_copy_links_copy_each_block_exactly(qtbot, view: ChatView) -> None:
    view.show_messages([ChatMessage("user", "code please"), ChatMessage("assistant", ANSWER)])
    view.flush()
    text = view.transcript.toPlainText()
    assert "python   Copy" in text and "sh   Copy" in text
    expected = ["def f(x):\n\treturn x  # tab-indented", "indented block\nsecond line", "echo 'hi'"]
    for number, code in enumerate(expected):
        QGuiApplication.clipboard().clear()
        with qtbot.waitSignal(view.sig_code_copied, timeout=1000) as copied:
            emit(view.transcript.anchorClicked, QUrl(view.transcript.links.href("code", 1, number)))
        assert copied.args == [1, number]
        assert QGuiApplication.clipboard().text() == code
    # A number past the last block, or a forged link, copies nothing.
    QGuiApplication.clipboard().setText("unchanged")
    emit(view.transcript.anchorClicked, QUrl(view.transcript.links.href("code", 1, 9)))
    emit(view.transcript.anchorClicked, QUrl("code:1/0"))
    assert QGuiApplication.clipboard().text() == "unchanged"


def colours_at(view: ChatView, needle: str) -> set[str]:
    document = view.transcript.document()
    found = document.find(needle)
    assert not found.isNull(), needle
    cursor = QTextCursor(document)
    cursor.setPosition(found.selectionStart() + 1)
    return {cursor.charFormat().foreground().color().name()}


def test_python_is_highlighted_with_palette_colours(view: ChatView) -> None:
    view.show_messages([ChatMessage("assistant", ANSWER)])
    view.flush()
    colors = view.transcript.colors
    assert colours_at(view, "def") == {colors.syntax["Keyword"].name()}
    assert colours_at(view, "# tab") == {colors.syntax["Comment"].name()}
    assert colours_at(view, "Two blocks") != colours_at(view, "def")  # prose stays prose


@pytest.mark.parametrize(
    "language",
    ["", "no-such-language", "../../etc/passwd", "x" * 500, "python\x00", "ПИТОН", "*", "."],
)
def test_odd_languages_are_plain_and_harmless(view: ChatView, language: str) -> None:
    assert code_blocks.lexer_for(language) is None
    answer = f"```{language}\nprint(1)\n```"
    view.show_messages([ChatMessage("assistant", answer)])
    view.flush()
    assert "print(1)" in view.transcript.toPlainText()
    assert view.transcript.code_of(0, 0) == "print(1)"


def test_only_pygments_own_lexers_are_used(monkeypatch) -> None:
    """A lexer registered by some installed package (an entry point) is never loaded for a
    fence: the alias table is built with plugins=False and lookups use built-in names."""
    import pygments.lexers as lexers

    def no_plugins():
        raise AssertionError("a plugin lookup was made")

    monkeypatch.setattr(lexers, "find_plugin_lexers", no_plugins)
    code_blocks._builtin_lexers.cache_clear()
    try:
        for language in ("python", "Rust", "js", "bash", "no-such-language"):
            code_blocks.lexer_for(language)
        assert type(code_blocks.lexer_for("py")).__name__ == "PythonLexer"
    finally:
        code_blocks._builtin_lexers.cache_clear()


def test_large_code_is_copyable_but_not_highlighted(view: ChatView) -> None:
    body = "\n".join(f"x_{i} = {i}  # n" for i in range(800))  # ~14 KB > HIGHLIGHT_MAX_CHARS
    view.show_messages([ChatMessage("assistant", f"```python\n{body}\n```")])
    view.flush()
    assert view.transcript.code_of(0, 0) == body
    base = view.transcript.colors
    assert colours_at(view, "# n") != {base.syntax["Comment"].name()}


def test_context_menu_copies_the_code_block_under_the_mouse(qtbot, view: ChatView) -> None:
    view.show_messages([ChatMessage("user", "code please"), ChatMessage("assistant", ANSWER)])
    view.flush()
    transcript = view.transcript
    document = transcript.document()

    def menu_at(needle: str) -> dict[str, object]:
        position = document.find(needle).selectionStart()
        menu = transcript.context_menu(position, QPoint(0, 0))
        qtbot.addWidget(menu)
        return {a.text(): a for a in menu.actions()}

    actions = menu_at("indented block")
    assert "Copy code block" in actions and "Copy this message" in actions
    QGuiApplication.clipboard().clear()
    actions["Copy code block"].trigger()
    assert QGuiApplication.clipboard().text() == "indented block\nsecond line"
    assert "Copy code block" not in menu_at("Two blocks")  # prose: no code action
