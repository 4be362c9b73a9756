"""Errors the engine raises; each message is a sentence a user can act on."""

from chatapp.error_text import STATUS_LINE, first_line


class EngineError(Exception):
    """Base class: anything that stops a generation or a model from loading."""


class ModelError(EngineError):
    """A model folder that cannot be run: what is missing or unsupported."""


class FolderFileError(ModelError):
    """A file the folder names that is missing, leads outside it or is not a regular file: the
    folder is refused, rather than another of its graphs tried instead."""


class ContextOverflowError(EngineError):
    """A prompt that does not fit in the model's context."""

    def __init__(self, prompt_tokens: int, context_length: int, at_least: bool = False) -> None:
        self.prompt_tokens = prompt_tokens  # a lower bound when `at_least` (not tokenized)
        self.context_length = context_length
        super().__init__(
            f"The prompt has {'at least ' if at_least else ''}{prompt_tokens} tokens but the "
            f"model's context holds {context_length}; shorten it or start a new chat."
        )


class DeviceFailure(EngineError):
    """The device stopped working (lost adapter, out of memory, driver error)."""

    def __init__(
        self, device_label: str, cause: BaseException, during: str = "during the answer"
    ) -> None:
        self.device_label = device_label
        super().__init__(f"{device_label} failed {during} ({first_line(cause, STATUS_LINE)}).")


class SlotStopped(EngineError):
    """A sequence pre-empted on a slot (engine/slots.py) was told to stop while it waited for
    room to resume: it ends there, with no more tokens."""
