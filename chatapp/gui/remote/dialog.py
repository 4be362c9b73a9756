"""File > Connect to server…: the address, an optional API key, and a model from the server.

The model list is fetched by a job on the window's JobRunner (never on the GUI thread): the
dialog stays responsive while a slow or unreachable server is asked. Connect is enabled once
the server has answered with its models, so a typo is found here and not at the first answer.

The API key stays in memory until the window closes (the dialog offers it again for the same
server) unless the user ticks "Remember the key": then it is written to chatapp's settings file,
which is plain text, and the box says so. The addresses of recent servers are saved, without keys.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from operator import attrgetter

from PySide6.QtCore import QSettings, Qt, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from chatapp.engine.backend import BackendError
from chatapp.gui.common.settings import read_json_object
from chatapp.gui.common.theme import ColorPick, set_text_color
from chatapp.gui.common.workers import JobError, JobHandle
from chatapp.remote import ServerListing, api_base, key_notice
from chatapp.session.remote_jobs import ConnectRequest

KEY_NOT_SAVED = "Not saved to disk; kept in memory until chatapp closes."
KEY_SAVED = "Saved unencrypted in chatapp's settings file; untick to forget it."
REMEMBER_TIP = (
    "Writes the key to chatapp's settings file, which is plain text: anyone who can read your "
    "files can read it. Unticked, the key is forgotten when chatapp closes."
)
SAVED_KEYS_SETTING = "remote/saved_keys"  # JSON {api base: key}, only keys the user chose to keep
# Text colours from the theme (readable in light and dark).
ERROR_STYLE: ColorPick = attrgetter("error")
NOTICE_STYLE: ColorPick = attrgetter("warning")
NOTE_STYLE: ColorPick = attrgetter("muted")

Fetch = Callable[[ConnectRequest], JobHandle]


class ConnectDialog(QDialog):
    def __init__(
        self,
        fetch: Fetch,
        recent: list[str],
        keys: dict[str, str],
        parent: QWidget | None = None,
        saved: Collection[str] = (),
    ) -> None:
        """`fetch` submits a model-listing job; `keys`: this session's keys by address;
        `saved`: the addresses whose key is in the settings file."""
        super().__init__(parent)
        self.setObjectName("connectDialog")
        self.setWindowTitle("Connect to server")
        self.fetch = fetch
        self.keys = keys
        self.saved = saved
        self.listing: ServerListing | None = None
        self._fetching: JobHandle | None = None
        self._build(recent)
        self._on_address_changed()

    def _build(self, recent: list[str]) -> None:
        intro = QLabel(
            "Chat with a model on an OpenAI-compatible server: vLLM, llama.cpp's server, "
            "or chatapp serve on another machine.",
            self,
        )
        intro.setWordWrap(True)
        self.address = QComboBox(self)
        self.address.setObjectName("serverAddress")
        self.address.setEditable(True)
        self.address.addItems(recent)
        self.address.setCurrentText(recent[0] if recent else "http://127.0.0.1:8000/v1")
        self.address.setMinimumContentsLength(32)
        line = self.address.lineEdit()
        assert line is not None
        line.setPlaceholderText("http://host:8000/v1")
        line.textChanged.connect(self._on_address_changed)
        line.returnPressed.connect(self.fetch_models)
        self.key_edit = QLineEdit(self)
        self.key_edit.setObjectName("apiKey")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setPlaceholderText("optional")
        self.key_edit.textChanged.connect(self._update_notice)
        self.key_edit.returnPressed.connect(self.fetch_models)
        self.remember_box = QCheckBox("Remember the key on this computer", self)
        self.remember_box.setObjectName("rememberKey")
        self.remember_box.setToolTip(REMEMBER_TIP)
        self.remember_box.toggled.connect(self._update_key_note)
        self.key_note = _label(KEY_NOT_SAVED, NOTE_STYLE, self)
        self.key_note.setWordWrap(False)  # one line: a wrapped one gets a wrong height in forms
        self.key_note.setObjectName("keyNote")
        self.fetch_button = QPushButton("Fetch models", self)
        self.fetch_button.setObjectName("fetchModelsButton")
        self.fetch_button.clicked.connect(self.fetch_models)
        self.model_box = QComboBox(self)
        self.model_box.setObjectName("remoteModel")
        self.model_box.setEnabled(False)
        self.model_box.setMinimumContentsLength(24)
        self.model_box.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        model_row = QHBoxLayout()
        model_row.addWidget(self.model_box, 1)
        model_row.addWidget(self.fetch_button)
        self.notice = _label("", NOTICE_STYLE, self)
        self.notice.setObjectName("keyNotice")
        self.status = _label("", NOTE_STYLE, self)
        self.status.setObjectName("connectStatus")

        form = QFormLayout()
        form.addRow("Server address", self.address)
        form.addRow("API key", self.key_edit)
        form.addRow("", self.remember_box)
        form.addRow("", self.key_note)
        form.addRow("Model", model_row)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self
        )
        self.connect_button = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        assert self.connect_button is not None
        self.connect_button.setText("Connect")
        self.connect_button.setObjectName("connectButton")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.notice)
        layout.addWidget(self.status)
        layout.addWidget(self.buttons)
        self.setMinimumWidth(560)

    # ---- what the user entered ------------------------------------------------------------
    def url(self) -> str:
        return self.address.currentText().strip()

    def api_key(self) -> str | None:
        return self.key_edit.text().strip() or None

    def remember(self) -> bool:
        """Whether the user asked to keep the key in the settings file."""
        return self.remember_box.isChecked()

    def request(self) -> ConnectRequest:
        model = self.model_box.currentData()
        return ConnectRequest(self.url(), self.api_key(), model if isinstance(model, str) else None)

    # ---- fetching the models ----------------------------------------------------------------
    @Slot()
    def fetch_models(self) -> None:
        try:
            api_base(self.url())
        except BackendError as exc:
            self._set_status(str(exc), ERROR_STYLE)
            return
        self._clear_models()
        self.fetch_button.setEnabled(False)
        self._set_status(f"Asking {self.url()} for its models…", NOTE_STYLE)
        handle = self._fetching = self.fetch(ConnectRequest(self.url(), self.api_key()))
        handle.sig_finished.connect(lambda listing, h=handle: self._on_listed(h, listing))
        handle.sig_errored.connect(lambda error, h=handle: self._on_failed(h, error))

    def _on_listed(self, handle: JobHandle, listing: ServerListing) -> None:
        if handle is not self._fetching:
            return  # an older request's answer
        self._fetching = None
        self.fetch_button.setEnabled(True)
        self.listing = listing
        for model in listing.models:
            context = f"  ({model.context_length}-token context)" if model.context_length else ""
            self.model_box.addItem(f"{model.id}{context}", model.id)
        self.model_box.setEnabled(bool(listing.models))
        self.connect_button.setEnabled(bool(listing.models))
        count = len(listing.models)
        self._set_status(
            f"{listing.server} serves {count} model{'s' if count != 1 else ''}.", NOTE_STYLE
        )
        if self.connect_button.isEnabled():
            self.connect_button.setFocus()

    def _on_failed(self, handle: JobHandle, error: JobError) -> None:
        if handle is not self._fetching:
            return
        self._fetching = None
        self.fetch_button.setEnabled(True)
        self._set_status(error.message, ERROR_STYLE)

    # ---- keeping the fields in step ---------------------------------------------------------
    @Slot()
    def _on_address_changed(self) -> None:
        self._fetching = None  # an answer for the old address no longer applies
        self.fetch_button.setEnabled(True)
        self._clear_models()
        self._set_status("Fetch the server's models, then connect.", NOTE_STYLE)
        known = self.keys.get(key_of(self.url()))
        if known and not self.key_edit.text():
            self.key_edit.setText(known)
        self.remember_box.setChecked(key_of(self.url()) in self.saved)
        self._update_notice()

    @Slot()
    def _update_key_note(self) -> None:
        self.key_note.setText(KEY_SAVED if self.remember() else KEY_NOT_SAVED)
        set_text_color(self.key_note, NOTICE_STYLE if self.remember() else NOTE_STYLE)

    @Slot()
    def _update_notice(self) -> None:
        try:
            text = key_notice(api_base(self.url()), self.api_key())
        except BackendError:
            text = None
        self.notice.setText(text or "")
        self.notice.setVisible(bool(text))

    def _clear_models(self) -> None:
        self.listing = None
        self.model_box.clear()
        self.model_box.setEnabled(False)
        self.connect_button.setEnabled(False)

    def _set_status(self, text: str, style: ColorPick) -> None:
        self.status.setText(text)
        set_text_color(self.status, style)


def key_of(url: str) -> str:
    """The address as the session's key memory files it (the API base, or the text)."""
    try:
        return api_base(url)
    except BackendError:
        return url


def saved_keys(settings: QSettings) -> dict[str, str]:
    """The keys the user asked to remember, by API base ({} when none or unreadable)."""
    data = read_json_object(settings, SAVED_KEYS_SETTING)  # too big or too deep: none
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and v}


def save_key(settings: QSettings, url: str, key: str | None) -> None:
    """Keep `key` for `url`'s server in the settings file; None forgets it."""
    keys = saved_keys(settings)
    if key:
        keys[key_of(url)] = key
    elif keys.pop(key_of(url), None) is None:
        return
    if keys:
        settings.setValue(SAVED_KEYS_SETTING, json.dumps(keys, sort_keys=True))
    else:
        settings.remove(SAVED_KEYS_SETTING)


def _label(text: str, style: ColorPick, parent: QWidget) -> QLabel:
    label = QLabel(text, parent)
    label.setWordWrap(True)
    set_text_color(label, style)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label
