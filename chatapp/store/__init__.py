"""Chat history in SQLite (standard `sqlite3`, no Qt): see `history` for the policies."""

from chatapp.store.errors import (
    ConversationNotFoundError,
    ImportFormatError,
    ImportTooLargeError,
    MessageNotFoundError,
    NotFoundError,
    ReadOnlyStoreError,
    SchemaTooNewError,
    StoreBusyError,
    StoreCorruptError,
    StoreError,
)
from chatapp.store.history import HistoryStore, default_history_path, open_default_store
from chatapp.store.models import (
    Alternative,
    ConversationDraft,
    ConversationInfo,
    Figures,
    MessageDraft,
    SearchHit,
    StoredConversation,
    StoredMessage,
)
from chatapp.store.recovery import Recovery

__all__ = [
    "Alternative",
    "ConversationDraft",
    "ConversationInfo",
    "ConversationNotFoundError",
    "Figures",
    "HistoryStore",
    "ImportFormatError",
    "ImportTooLargeError",
    "MessageDraft",
    "MessageNotFoundError",
    "NotFoundError",
    "ReadOnlyStoreError",
    "Recovery",
    "SchemaTooNewError",
    "SearchHit",
    "StoreBusyError",
    "StoreCorruptError",
    "StoreError",
    "StoredConversation",
    "StoredMessage",
    "default_history_path",
    "open_default_store",
]
