"""Chat history in SQLite (standard `sqlite3`, no Qt): see `history` for the policies."""

from chatapp.store.context_policy import ContextFit, Turn, fit_to_context
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
    "ContextFit",
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
    "Turn",
    "default_history_path",
    "fit_to_context",
    "open_default_store",
]
