"""The chat's Qt owner: the window's job runners, the backend session and the chat.

`BackendSession` (session/backend_session.py: the loaded model or connected server, loading,
conversions, the state) and `Chat` (session/chat.py: the Conversation and its answers) have no
Qt; this object gives them the window's JobRunners as their `Submit` and makes their events
(`backend_session.events`, `chat.events`) arrive on the GUI thread (gui/common/gui_thread.py).
Views call the two cores and connect to their events directly; the history
(chatapp/gui/history) connects to `chat.events.conversation_changed`.

Answers, loads and connections run on the window's engine runner (the comparison view submits
its jobs to the same one); conversions on the tool runner, so they never wait behind an answer.
"""

from __future__ import annotations

from PySide6.QtCore import QObject

from chatapp.gui.common.gui_thread import gui_thread_delivery
from chatapp.gui.common.workers import JobRunner
from chatapp.session.backend_session import BackendSession, State
from chatapp.session.chat import Chat
from chatapp.session.chat_settings import GenerationOptions
from chatapp.session.model_jobs import EngineHost

__all__ = ["ChatController", "GenerationOptions", "State"]


class ChatController(QObject):
    def __init__(
        self,
        runner: JobRunner | None = None,
        host: EngineHost | None = None,
        parent: QObject | None = None,
        tools: JobRunner | None = None,
    ) -> None:
        super().__init__(parent)
        self.runner = runner or JobRunner("ChatWorkerThread", parent=self)
        self.tools = tools or self.runner  # conversions: off the engine's queue when given
        self.backend_session = BackendSession(self.runner.watch, host, self.tools.watch)
        self.chat = Chat(self.backend_session)
        deliver = gui_thread_delivery(self)
        self.backend_session.events.deliver_via(deliver)
        self.chat.events.deliver_via(deliver)

    def shutdown(self) -> bool:
        """Stop every job and the threads; safe to call twice. True once they ended."""
        ended = self.runner.shutdown()
        ended = self.tools.shutdown() and ended
        self.backend_session.host.engine = None  # the thread is over: free the session here
        return ended
