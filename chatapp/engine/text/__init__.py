"""Text: tokenizers, chat templates, control tokens, long texts in pieces, stop strings. No Qt."""
