"""Connected to a server, the side panel holds the server's own figures under the live
figures: on the tests' 1280x800 screen (a window of 1177x736) the panel still fits without
scrolling after an answer, and the line under the answer names no variant of ours."""

from __future__ import annotations

from chatapp.gui.main_window import MainWindow
from chatapp.session import formatting as fmt
from tests.gui.conftest import greedy, send_and_wait, set_sampling
from tests.gui.remote.conftest import connect
from tests.serving import Served


def test_connected_the_side_panel_fits_and_the_answer_names_no_variant(
    qtbot, window: MainWindow, served: Served
) -> None:
    window.show()
    connect(qtbot, window, served.url)
    set_sampling(window, greedy(6))
    send_and_wait(qtbot, window, "hello")
    answer = window.chat.conversation.messages[-1]
    assert answer.figures is not None and answer.figures.variant is None
    assert fmt.figures_line(answer.figures).startswith("varied-llama · remote server")
    qtbot.wait(200)
    panel = window.chat.side_panel
    bar = window.side_scroll.verticalScrollBar()
    assert window.side_scroll.isVisible()
    opened = [s.is_open() for s in panel.sections]
    assert bar.maximum() == 0, (opened, panel.minimumSizeHint(), window.side_scroll.height())
