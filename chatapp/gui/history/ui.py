"""Puts the history into the main window: the conversation list on the left, a Conversation
menu, editing a sent message, export/import dialogs, the context figures, and polling for a
second chatapp instance's writes.

Dialogs are attributes (`confirm`, `ask_save_path`, `ask_open_path`) so tests can answer them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Slot
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence
from PySide6.QtWidgets import QFileDialog, QMessageBox

from chatapp.gui.chat.controller import State
from chatapp.gui.chat.feature import chat_of
from chatapp.gui.common.export_folder import export_folder, remember_export_folder
from chatapp.gui.history.controller import HistoryController, OpenedHistory
from chatapp.gui.history.panel import HistoryPanel, Row
from chatapp.gui.history.unsaved import UnsavedGuard
from chatapp.safe_delete import write_replacing
from chatapp.session.context import ContextReport
from chatapp.session.conversation import Conversation
from chatapp.store import ConversationInfo, SearchHit

if TYPE_CHECKING:
    from chatapp.gui.main_window import MainWindow

POLL_INTERVAL_MS = 2000  # how often to look for another instance's writes (a cheap PRAGMA)
MEASURE_DEBOUNCE_MS = 400
# How session/history_sync.py starts an import's failure: the window clears it after a good import.
IMPORT_FAILED = "Could not import "
LAST_CHAT_KEY = "history/last_chat"  # the chat shown when the window closed: shown at start
EXPORT_KINDS = {
    "markdown": ("Markdown", ".md", "Markdown (*.md);;All files (*)"),
    "json": ("JSON", ".json", "chatapp JSON export (*.json);;All files (*)"),
}


class HistoryUi(QObject):
    def __init__(self, window: MainWindow, opened: OpenedHistory) -> None:
        super().__init__(window)
        self.window = window
        self.chat_feature = chat_of(window)
        self.chat = self.chat_feature.controller
        self.controller = HistoryController(
            self.chat,
            opened.store,
            system_prompt=self.chat_feature.system_prompt,
            parent=self,
        )
        self.panel = HistoryPanel(window)
        window.add_pane(self.panel)
        self._query = ""
        self._shown: Conversation | None = None
        # Dialogs, replaceable in tests.
        self.confirm = self._confirm
        self.ask_save_path = self._ask_save_path
        self.ask_open_path = self._ask_open_path

        self._measure_timer = QTimer(self)
        self._measure_timer.setSingleShot(True)
        self._measure_timer.setInterval(MEASURE_DEBOUNCE_MS)
        self._measure_timer.timeout.connect(self.measure)
        self.poll_timer = QTimer(self)
        self.poll_timer.setInterval(POLL_INTERVAL_MS)
        self.poll_timer.timeout.connect(self.poll)

        # Marks, retries, asks before a chat goes away.
        self.unsaved = UnsavedGuard(window, self.controller, self._ask_export_path)
        last = _stored_id(window.settings.value(LAST_CHAT_KEY))  # read before it changes
        self._build_menu()
        self._connect()
        window.installEventFilter(self)
        window.before_shutdown.append(self.shutdown)  # closing asks first: leave_checks
        self.refresh()
        self._update_actions()
        if self.controller.sync_core.enabled:
            self.poll_timer.start()
        if opened.notice:
            window.show_message(opened.notice, opened.level)
        if (
            last is not None
            and self.controller.sync_core.current_id is None
            and not self.chat.chat.conversation.messages
        ):
            self.open(last)  # a restart goes on where the window was closed

    # ---- building -----------------------------------------------------------------------------
    def _build_menu(self) -> None:
        w = self.window
        menu = self.menu = w.menus.add_menu("&Conversation")

        def action(
            text: str,
            slot: Callable[[], object],
            shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None,
        ) -> QAction:
            act = QAction(text, w)
            if shortcut is not None:
                act.setShortcut(QKeySequence(shortcut))
            act.triggered.connect(slot)
            menu.addAction(act)
            return act

        self.search_action = action(
            "&Search conversations", self._focus_search, QKeySequence.StandardKey.Find
        )
        self.rename_action = action("&Rename…", self.rename_current, "F2")
        self.delete_action = action("&Delete…", self.delete_current)
        menu.addSeparator()
        self.edit_last_action = action("&Edit last message", self.edit_last, "Ctrl+Up")
        self.copy_action = action("&Copy conversation as Markdown", self.copy_current)
        menu.addSeparator()
        self.export_markdown_action = action(
            "Export as &Markdown…", lambda: self.export_current("markdown")
        )
        self.export_json_action = action("Export as &JSON…", lambda: self.export_current("json"))
        self.import_action = action("&Import conversation…", self.import_conversation)

    def _connect(self) -> None:
        c, h, p, w = self.chat, self.controller, self.panel, self.window
        p.sig_open.connect(self.open)
        p.sig_new.connect(w.new_chat)
        p.sig_rename.connect(h.sync_core.rename)
        p.sig_delete.connect(self.delete)
        p.sig_export.connect(self.export)
        p.sig_import.connect(self.import_conversation)
        p.sig_search.connect(self._on_search)
        h.events.list_changed.connect(self.refresh)
        h.events.list_changed.connect(self._update_actions)  # the history may be writable now
        h.events.current_changed.connect(self._on_current_changed)
        h.events.message.connect(self._on_history_message)
        self.chat_feature.chat_view.sig_edit_submitted.connect(self._on_edit_submitted)
        c.chat.events.context.connect(self._on_context)
        c.chat.events.conversation_changed.connect(self._on_conversation_changed)
        c.backend_session.events.model_loaded.connect(lambda _summary: self.measure())
        c.backend_session.events.state_changed.connect(lambda _state: self._update_actions())
        # What the next answer sends changed (its token limit, the system prompt): measure.
        self.chat_feature.side_panel.sig_request_changed.connect(self._measure_timer.start)

    # ---- the list -----------------------------------------------------------------------------
    @Slot()
    def refresh(self) -> None:
        h = self.controller
        if not h.sync_core.enabled:
            self.panel.set_rows([], None, "Chats are not being saved (see the message above).")
            return
        if self._query:
            rows = _search_rows(h.sync_core.search(self._query))
            empty = f"Nothing found for “{self._query}”."
        else:
            rows = [_info_row(info) for info in h.sync_core.conversations()]
            empty = "No saved chats yet. A chat is saved here once you send its first message."
        self.panel.set_rows(rows, h.sync_core.current_id, empty)

    @Slot(str)
    def _on_search(self, query: str) -> None:
        self._query = query.strip()
        self.refresh()

    @Slot(object)
    def _on_current_changed(self, conversation_id: int | None) -> None:
        self.panel.set_current(conversation_id)
        if conversation_id is None:
            self.window.settings.remove(LAST_CHAT_KEY)
        else:
            self.window.settings.setValue(LAST_CHAT_KEY, conversation_id)
        self._update_actions()

    @Slot(int)
    def open(self, conversation_id: int) -> bool:
        if self.chat.backend_session.state is State.GENERATING:
            self.window.notify(
                "Wait for the answer (or stop it) before opening another conversation.", 5000
            )
            self.panel.set_current(self.controller.sync_core.current_id)
            return False
        if not self.unsaved.may_leave("open"):
            self.panel.set_current(self.controller.sync_core.current_id)
            return False
        self.chat_feature.chat_view.cancel_edit()
        opened = self.controller.sync_core.open(conversation_id)
        if opened:
            # The figures panel shows this chat's last answer, as after it was written.
            self.chat_feature.side_panel.start_answer()
            last = next(
                (
                    m
                    for m in reversed(self.chat.chat.conversation.messages)
                    if m.figures is not None
                ),
                None,
            )
            if last is not None and last.figures is not None:
                self.chat_feature.side_panel.show_stats(last.figures)
        else:
            self.panel.set_current(self.controller.sync_core.current_id)
        return opened

    @Slot(int)
    def delete(self, conversation_id: int) -> bool:
        if self.controller.sync_core.read_only:
            self.window.show_message(
                "The chat history is read-only: its chats cannot be deleted.", "warning"
            )
            return False
        info = next(
            (i for i in self.controller.sync_core.conversations() if i.id == conversation_id), None
        )
        title = info.title if info is not None else "this conversation"
        current = conversation_id == self.controller.sync_core.current_id
        if current and self.chat.backend_session.state is State.GENERATING:
            self.window.show_message("Stop the answer before deleting this conversation.", "info")
            return False
        if not self.confirm(
            "Delete conversation",
            f"Delete “{title}” and all its messages? This cannot be undone.",
        ):
            return False
        if current:
            self.window.new_chat()
        return self.controller.sync_core.delete(conversation_id)

    @Slot()
    def delete_current(self) -> None:
        if self.controller.sync_core.current_id is not None:
            self.delete(self.controller.sync_core.current_id)

    @Slot()
    def rename_current(self) -> None:
        if self.controller.sync_core.current_id is not None:
            self.panel.start_rename(self.controller.sync_core.current_id)

    @Slot()
    def _focus_search(self) -> None:
        self.panel.search_edit.setFocus()
        self.panel.search_edit.selectAll()

    # ---- export / import ----------------------------------------------------------------------
    @Slot(int, str)
    def export(self, conversation_id: int, kind: str) -> Path | None:
        label, suffix, filters = EXPORT_KINDS[kind]
        info = next(
            (i for i in self.controller.sync_core.conversations() if i.id == conversation_id), None
        )
        name = _file_name(info.title if info is not None else "conversation") + suffix
        folder = export_folder(self.window.settings)
        path = self.ask_save_path(f"Export conversation as {label}", str(folder / name), filters)
        if not path:
            return None
        text = self.controller.sync_core.export_text(conversation_id, kind)
        if text is None:
            return None
        target = Path(path)
        if not target.suffix:
            target = target.with_suffix(suffix)
        try:
            write_replacing(target, text)
        except OSError as exc:
            self.window.show_message(
                f"Could not write {target}: {exc.strerror or exc}", "error", cause="export"
            )
            return None
        remember_export_folder(self.window.settings, target)
        self.window.dismiss_message(cause="export")  # an export that failed before is done
        self.window.notify(f"Exported to {target}", 8000)
        return target

    def export_current(self, kind: str) -> Path | None:
        if self.controller.sync_core.current_id is None:
            return None
        return self.export(self.controller.sync_core.current_id, kind)

    @Slot()
    def import_conversation(self) -> int | None:
        folder = str(export_folder(self.window.settings))
        path = self.ask_open_path(
            "Import a conversation", folder, "chatapp JSON export (*.json);;All files (*)"
        )
        if not path:
            return None
        if self.chat.backend_session.state is State.GENERATING:
            self.window.show_message("Wait for the answer before importing.", "info")
            return None
        if self.controller.sync_core.read_only:
            self.window.show_message(
                "The chat history is read-only: nothing can be imported into it.", "warning"
            )
            return None
        # The imported chat is opened, unless the one shown has unsaved messages to keep.
        show = self.unsaved.unsaved_count() == 0 or self.unsaved.may_leave("import")
        conversation_id = self.controller.sync_core.import_file(path, show=show)
        if conversation_id is not None:
            self.window.dismiss_message(cause="import")  # a failed import before is old
            where = "" if show else " (in the list)"
            self.window.notify(f"Imported {Path(path).name}{where}", 8000)
        return conversation_id

    @Slot(str, str)
    def _on_history_message(self, text: str, level: str) -> None:
        # An import's failure goes once an import succeeds; the history's notices stay.
        cause = "import" if text.startswith(IMPORT_FAILED) else ""
        self.window.show_message(text, level, cause=cause)

    @Slot()
    def copy_current(self) -> None:
        if self.controller.sync_core.current_id is None:
            return
        text = self.controller.sync_core.export_text(
            self.controller.sync_core.current_id, "markdown"
        )
        if text is not None:
            QGuiApplication.clipboard().setText(text)
            self.window.notify("Copied the conversation as Markdown.", 3000)

    # ---- editing a sent message -----------------------------------------------------------------
    @Slot()
    def edit_last(self) -> None:
        messages = self.chat.chat.conversation.messages
        last = next(
            (i for i in range(len(messages) - 1, -1, -1) if messages[i].role == "user"), None
        )
        if last is not None:
            self.chat_feature.chat_view.begin_edit(last)

    @Slot(int, str)
    def _on_edit_submitted(self, index: int, text: str) -> None:
        if self.chat.chat.edit(index, text, self.chat_feature.options()):
            self.chat_feature.chat_view.finish_edit()

    # ---- context figures ------------------------------------------------------------------------
    @Slot()
    def measure(self) -> None:
        """Ask the worker what of this conversation the next answer would send."""
        if self.chat.backend_session.state is State.READY:
            self.chat.chat.measure_context(self.chat_feature.options())

    @Slot(object)
    def _on_context(self, report: ContextReport | None) -> None:
        chat = self.chat_feature
        chat.chat_view.set_context(report, render=report is not None)
        if report is None:
            total = (
                self.chat.backend_session.backend.max_context
                if self.chat.backend_session.backend is not None
                else 0
            )
            chat.side_panel.set_context(0, total, "")
        else:
            chat.side_panel.set_context(
                report.prompt_tokens, report.limit, report.describe(), report.dropped, report.model
            )

    @Slot(object)
    def _on_conversation_changed(self, conversation: Conversation) -> None:
        if conversation is not self._shown:
            self._shown = conversation
            self.chat_feature.chat_view.cancel_edit()
        self.panel.set_current(conversation.id)
        self._update_actions()
        if self.chat.backend_session.state is State.READY and conversation.messages:
            self.measure()

    def _update_actions(self) -> None:
        h = self.controller
        stored = h.sync_core.enabled and h.sync_core.current_id is not None
        writable = h.sync_core.enabled and not h.sync_core.read_only
        generating = self.chat.backend_session.state is State.GENERATING
        for act in (self.export_markdown_action, self.export_json_action, self.copy_action):
            act.setEnabled(stored)
        self.rename_action.setEnabled(stored and writable)
        self.delete_action.setEnabled(stored and writable and not generating)
        self.import_action.setEnabled(writable and not generating)
        self.search_action.setEnabled(h.sync_core.enabled)
        self.edit_last_action.setEnabled(self.chat.backend_session.state is State.READY)
        self.panel.setEnabled(h.sync_core.enabled)
        # Shown read-only, not hidden: the chats can be opened, searched and exported.
        store = h.sync_core.store
        self.panel.set_read_only(
            store.read_only_message() if store is not None and store.read_only else None
        )

    # ---- another instance, and closing ----------------------------------------------------------
    @Slot()
    def poll(self) -> bool:
        return self.controller.sync_core.poll_external_changes()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.window and event.type() == QEvent.Type.WindowActivate:
            self.poll()
        return False

    def shutdown(self) -> None:
        self.poll_timer.stop()
        self._measure_timer.stop()
        self.unsaved.retry_timer.stop()
        self.controller.sync_core.close()

    # ---- dialogs (replaceable) ------------------------------------------------------------------
    def _ask_export_path(self, caption: str, suggested: str, filters: str) -> str | None:
        return self.ask_save_path(caption, suggested, filters)  # as replaced by a test

    def _confirm(self, title: str, text: str) -> bool:
        box = QMessageBox(QMessageBox.Icon.Question, title, text, parent=self.window)
        box.setObjectName("confirmDeleteBox")
        box.setTextFormat(Qt.TextFormat.PlainText)  # it quotes a chat's title
        box.setStandardButtons(QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        yes = box.button(QMessageBox.StandardButton.Yes)
        yes.setText("Delete")
        result = box.exec()
        box.deleteLater()
        return result == QMessageBox.StandardButton.Yes

    def _ask_save_path(self, caption: str, suggested: str, filters: str) -> str | None:
        path, _ = QFileDialog.getSaveFileName(self.window, caption, suggested, filters)
        return path or None

    def _ask_open_path(self, caption: str, folder: str, filters: str) -> str | None:
        path, _ = QFileDialog.getOpenFileName(self.window, caption, folder, filters)
        return path or None


def install_history(window: MainWindow, opened: OpenedHistory) -> HistoryUi:
    ui = HistoryUi(window, opened)
    window.add_feature(ui)  # window.feature(HistoryUi) finds it
    return ui


# ---- rows ---------------------------------------------------------------------------------------
def when(moment: datetime, now: datetime | None = None) -> str:
    local = moment.astimezone()
    today = (now or datetime.now().astimezone()).date()
    if local.date() == today:
        return f"Today {local:%H:%M}"
    if local.date() == today - timedelta(days=1):
        return f"Yesterday {local:%H:%M}"
    if today - local.date() < timedelta(days=7):
        return f"{local:%a %H:%M}"
    return f"{local.day} {local:%b %Y}"


def _info_row(info: ConversationInfo) -> Row:
    count = info.message_count
    # Which model the chat was with, before the count (a narrow list elides the end first).
    model = f" · {info.model}" if info.model else ""
    subtitle = f"{when(info.updated)}{model} · {count} message{'s' if count != 1 else ''}"
    tip = f"{info.title}\n{subtitle}" + (f"\nModel: {info.model}" if info.model else "")
    return Row(info.id, info.title, subtitle, tip)


def _search_rows(hits: Sequence[SearchHit]) -> list[Row]:
    """One row per conversation, in the order found; the first matching message's text under
    the title (or "title matches" when only the title does)."""
    found: dict[int, SearchHit] = {}
    for hit in hits:
        first = found.get(hit.conversation_id)
        if first is None or (first.message_id is None and hit.message_id is not None):
            found[hit.conversation_id] = hit
    rows = []
    for hit in found.values():
        if hit.message_id is None:
            subtitle = "title matches"
        else:
            subtitle = f"{'You' if hit.role == 'user' else 'Assistant'}: {hit.snippet}"
        tip = f"{hit.conversation_title}\n{hit.snippet}"
        rows.append(Row(hit.conversation_id, hit.conversation_title, subtitle, tip))
    return rows


def _file_name(title: str) -> str:
    name = re.sub(r"[^\w\- ]+", "", title, flags=re.UNICODE).strip().replace(" ", "-")
    return name[:60] or "conversation"


def _stored_id(value: object) -> int | None:
    """A conversation id as QSettings gives it back (an int or its text; else none)."""
    try:
        number = int(str(value)) if isinstance(value, int | str) and len(str(value)) < 20 else None
    except ValueError:
        return None
    return number if number is not None and 0 < number < 2**63 else None  # SQLite's ids
