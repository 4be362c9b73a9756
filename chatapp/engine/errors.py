"""Errors the engine raises; each message is a sentence a user can act on."""


class EngineError(Exception):
    """Base class: anything that stops a generation or a model from loading."""


class ModelError(EngineError):
    """A model folder that cannot be run: what is missing or unsupported."""


class ContextOverflowError(EngineError):
    """A prompt that does not fit in the model's context."""

    def __init__(self, prompt_tokens: int, context_length: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.context_length = context_length
        super().__init__(
            f"The prompt has {prompt_tokens} tokens but the model's context holds "
            f"{context_length}; shorten it or start a new chat."
        )
