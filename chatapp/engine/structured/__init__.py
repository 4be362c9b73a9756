"""Structured output: grammars for JSON and JSON schemas, and tool calls. No Qt."""
