"""The chat history in the window: conversation list, its controller, and the menu hooks."""
