"""The one error the converter raises: its message is a sentence for the user."""


class ConversionError(Exception):
    """A GGUF file that cannot be converted, or an output that cannot be written."""
