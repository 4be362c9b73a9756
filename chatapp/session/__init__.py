"""A chat session as plain data, without Qt: the conversation, what of it fits the model's
context, and how figures read. The GUI drives it; the engine and the store sit below it."""
