"""A bare chat view, shown at a fixed size, for the transcript's tests."""

from __future__ import annotations

import pytest

from chatapp.gui.chat.view import ChatView


@pytest.fixture
def view(qtbot) -> ChatView:
    widget = ChatView()
    qtbot.addWidget(widget)
    widget.resize(700, 500)
    widget.show()
    return widget
