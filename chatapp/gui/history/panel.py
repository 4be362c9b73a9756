"""The conversation list beside the chat: search box, "New chat", one row per conversation.

A view only: it shows rows it is given and says what the user asked for through `sig_*`
signals (history_ui decides, asks for confirmation and talks to the store). The search box is
debounced: `sig_search` fires once typing pauses, not per keystroke.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    QRect,
    QSize,
    Qt,
    QTimer,
    Signal,
    Slot,
)
from PySide6.QtGui import (
    QFont,
    QKeyEvent,
    QKeySequence,
    QMouseEvent,
    QPainter,
    QPalette,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from chatapp.gui.chat.safe_document import plain_tip
from chatapp.gui.common.qtcompat import emit
from chatapp.gui.common.theme import colors, muted

SEARCH_DEBOUNCE_MS = 250
ID_ROLE = Qt.ItemDataRole.UserRole
SUBTITLE_ROLE = Qt.ItemDataRole.UserRole + 1
TITLE_ROLE = Qt.ItemDataRole.UserRole + 2  # the stored title, to tell a rename from a repaint


@dataclass(frozen=True)
class Row:
    conversation_id: int
    title: str
    subtitle: str  # when, how long; or the matching text while searching
    tooltip: str = ""


class _RowDelegate(QStyledItemDelegate):
    """Two lines per row: the title, and a smaller grey line under it."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex):
        metrics = option.fontMetrics
        return QSize(160, metrics.height() * 2 + 14)

    def paint(
        self,
        painter: QPainter,
        option: QStyleOptionViewItem,
        index: QModelIndex | QPersistentModelIndex,
    ) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        title, opt.text = opt.text, ""
        style = opt.widget.style() if opt.widget is not None else None
        if style is not None:  # background, selection and focus only
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        rect = opt.rect.adjusted(8, 5, -8, -5)
        line = opt.fontMetrics.height()
        painter.save()
        bold = QFont(opt.font)
        bold.setWeight(QFont.Weight.DemiBold)
        painter.setFont(bold)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        painter.setPen(opt.palette.color(role))
        top = QRect(rect.left(), rect.top(), rect.width(), line)
        painter.drawText(
            top,
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            painter.fontMetrics().elidedText(title, Qt.TextElideMode.ElideRight, rect.width()),
        )
        small = QFont(opt.font)
        if small.pointSizeF() > 0:
            small.setPointSizeF(max(7.0, small.pointSizeF() - 1))
        painter.setFont(small)
        painter.setPen(opt.palette.color(role) if selected else colors().muted)
        subtitle = str(index.data(SUBTITLE_ROLE) or "")
        bottom = QRect(rect.left(), rect.top() + line + 2, rect.width(), line)
        painter.drawText(
            bottom,
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            painter.fontMetrics().elidedText(subtitle, Qt.TextElideMode.ElideRight, rect.width()),
        )
        painter.restore()

    def updateEditorGeometry(self, editor: QWidget, option: QStyleOptionViewItem, index) -> None:
        rect = option.rect.adjusted(4, 2, -4, 0)
        rect.setHeight(option.fontMetrics.height() + 8)
        editor.setGeometry(rect)


class ConversationList(QListWidget):
    """Enter opens, F2 renames, Delete deletes. A right click only opens the context menu: it
    does not move the selection, which marks the conversation shown."""

    sig_delete_key = Signal(int)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.RightButton:
            event.accept()
            return
        super().mousePressEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        item = self.currentItem()
        if (
            item is not None
            and self.state() != QAbstractItemView.State.EditingState
            and event.matches(QKeySequence.StandardKey.Delete)
        ):
            emit(self.sig_delete_key, int(item.data(ID_ROLE)))
            event.accept()
            return
        super().keyPressEvent(event)


class HistoryPanel(QWidget):
    sig_open = Signal(int)
    sig_new = Signal()
    sig_rename = Signal(int, str)
    sig_delete = Signal(int)
    sig_export = Signal(int, str)  # conversation id, "markdown" | "json"
    sig_import = Signal()
    sig_search = Signal(str)  # debounced

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("historyPanel")
        self._current: int | None = None
        self._filling = False
        self.read_only = False

        self.search_edit = QLineEdit(self)
        self.search_edit.setObjectName("conversationSearch")
        self.search_edit.setPlaceholderText("Search conversations")
        self.search_edit.setClearButtonEnabled(True)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DEBOUNCE_MS)
        self._search_timer.timeout.connect(self._on_search_timeout)
        self.search_edit.textChanged.connect(lambda _t: self._search_timer.start())
        self.search_edit.returnPressed.connect(self._on_search_timeout)

        self.new_button = QPushButton("New chat", self)
        self.new_button.setObjectName("historyNewButton")
        self.new_button.setToolTip("Start an empty conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.sig_new)

        self.list = ConversationList(self)
        self.list.setObjectName("conversationList")
        self.list.setItemDelegate(_RowDelegate(self.list))
        self.list.setUniformItemSizes(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._on_context_menu)
        self.list.itemClicked.connect(self._on_item_activated)
        self.list.itemActivated.connect(self._on_item_activated)
        self.list.itemChanged.connect(self._on_item_changed)
        self.list.sig_delete_key.connect(self.sig_delete)

        # A history that cannot be written is shown, and says so (issue 12).
        self.read_only_label = QLabel("Read-only history: changes are not saved", self)
        self.read_only_label.setObjectName("historyReadOnlyLabel")
        self.read_only_label.setWordWrap(True)
        self.read_only_label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
        font = self.read_only_label.font()
        font.setItalic(True)
        self.read_only_label.setFont(font)
        self.read_only_label.hide()

        self.empty_label = QLabel("", self)
        self.empty_label.setObjectName("historyEmptyLabel")
        self.empty_label.setWordWrap(True)
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.empty_label.setContentsMargins(4, 12, 4, 12)
        muted(self.empty_label)

        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.new_button)
        top.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        layout.setSpacing(6)
        layout.addLayout(top)
        layout.addWidget(self.read_only_label)
        layout.addWidget(self.search_edit)
        layout.addWidget(self.list, 1)
        layout.addWidget(self.empty_label)
        layout.addStretch(0)
        self.setMinimumWidth(180)

    def sizeHint(self) -> QSize:
        return QSize(250, 400)

    # ---- rows -------------------------------------------------------------------------------
    def set_rows(self, rows: Sequence[Row], current: int | None, empty_text: str = "") -> None:
        self._filling = True
        scroll = self.list.verticalScrollBar().value()
        try:
            self.list.clear()
            for row in rows:
                item = QListWidgetItem(row.title)
                item.setData(ID_ROLE, row.conversation_id)
                item.setData(SUBTITLE_ROLE, row.subtitle)
                item.setData(TITLE_ROLE, row.title)
                item.setToolTip(plain_tip(row.tooltip or row.title))  # titles are imported
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
                self.list.addItem(item)
        finally:
            self._filling = False
        self.list.verticalScrollBar().setValue(scroll)
        self.empty_label.setText(empty_text)
        self.empty_label.setVisible(not rows and bool(empty_text))
        self.set_current(current)

    def set_current(self, conversation_id: int | None) -> None:
        """Select the row of the conversation shown (none for an unsaved new chat)."""
        self._current = conversation_id
        self._filling = True
        try:
            item = self.item_for(conversation_id) if conversation_id is not None else None
            if item is None:
                self.list.clearSelection()
                self.list.setCurrentRow(-1)
            else:
                self.list.setCurrentItem(item)
                self.list.scrollToItem(item)
        finally:
            self._filling = False

    def item_for(self, conversation_id: int) -> QListWidgetItem | None:
        for i in range(self.list.count()):
            item = self.list.item(i)
            if item.data(ID_ROLE) == conversation_id:
                return item
        return None

    def ids(self) -> list[int]:
        return [int(self.list.item(i).data(ID_ROLE)) for i in range(self.list.count())]

    def titles(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def query(self) -> str:
        return self.search_edit.text().strip()

    def set_read_only(self, reason: str | None) -> None:
        """Rows can be opened and exported but not renamed, deleted or imported into."""
        self.read_only = reason is not None
        self.read_only_label.setVisible(self.read_only)
        self.read_only_label.setToolTip(reason or "")
        self.list.setEditTriggers(
            QAbstractItemView.EditTrigger.NoEditTriggers
            if self.read_only
            else QAbstractItemView.EditTrigger.EditKeyPressed
        )

    def start_rename(self, conversation_id: int) -> None:
        if self.read_only:
            return
        item = self.item_for(conversation_id)
        if item is not None:
            self.list.setCurrentItem(item)
            self.list.editItem(item)

    # ---- user input -------------------------------------------------------------------------
    @Slot()
    def _on_search_timeout(self) -> None:
        self._search_timer.stop()
        emit(self.sig_search, self.query())

    @Slot(QListWidgetItem)
    def _on_item_activated(self, item: QListWidgetItem) -> None:
        conversation_id = int(item.data(ID_ROLE))
        if conversation_id != self._current:
            emit(self.sig_open, conversation_id)

    @Slot(QListWidgetItem)
    def _on_item_changed(self, item: QListWidgetItem) -> None:
        if self._filling:
            return
        title = " ".join(item.text().split())
        old = str(item.data(TITLE_ROLE))
        if title and title != old:
            emit(self.sig_rename, int(item.data(ID_ROLE)), title)
        elif title != item.text():
            self._filling = True
            item.setText(old)  # an empty name: keep the old one
            self._filling = False

    @Slot(QPoint)
    def _on_context_menu(self, pos: QPoint) -> None:
        menu = self.context_menu(self.list.itemAt(pos))
        menu.exec(self.list.viewport().mapToGlobal(pos))
        menu.deleteLater()

    def context_menu(self, item: QListWidgetItem | None) -> QMenu:
        """The list's context menu for `item` (None: the empty area); a method for tests."""
        menu = QMenu(self)
        menu.setObjectName("conversationMenu")
        if item is not None:
            cid = int(item.data(ID_ROLE))
            menu.addAction("Open").triggered.connect(lambda: emit(self.sig_open, cid))
            rename = menu.addAction("Rename")
            rename.triggered.connect(lambda: self.start_rename(cid))
            rename.setEnabled(not self.read_only)
            menu.addSeparator()
            menu.addAction("Export as Markdown…").triggered.connect(
                lambda: emit(self.sig_export, cid, "markdown")
            )
            menu.addAction("Export as JSON…").triggered.connect(
                lambda: emit(self.sig_export, cid, "json")
            )
            menu.addSeparator()
            delete = menu.addAction("Delete…")
            delete.triggered.connect(lambda: emit(self.sig_delete, cid))
            delete.setEnabled(not self.read_only)
            menu.addSeparator()
        menu.addAction("New chat").triggered.connect(lambda: emit(self.sig_new))
        import_action = menu.addAction("Import conversation…")
        import_action.triggered.connect(lambda: emit(self.sig_import))
        import_action.setEnabled(not self.read_only)
        return menu
