"""The banner counts the messages it shows, so that an old one can be cleared (issue 37)."""

from __future__ import annotations

from chatapp.gui.common.banner import MessageBanner


def test_the_banner_counts_its_messages(qtbot) -> None:
    banner = MessageBanner()
    qtbot.addWidget(banner)
    banner.show()
    banner.show_message("one", "warning", until_answer=True)
    first = banner.serial
    banner.show_message("two", "error", until_answer=True)
    banner.dismiss_if_before(first)  # "two" came later
    assert banner.text() == "two" and banner.level == "error"
    banner.dismiss_if_before(banner.serial)
    assert banner.level == "" and banner.isHidden()
    banner.show_message("a notice", "warning")  # not about a failure: only dismissed by hand
    banner.dismiss_if_before(banner.serial)
    assert banner.isVisible() and banner.text() == "a notice"
