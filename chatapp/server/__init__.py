"""`chatapp serve`: the loaded model behind an OpenAI-compatible HTTP API (docs/server.md).

No Qt here. One thread owns the Engine and answers one request at a time (`worker.py`); the
HTTP side (`app.py`, Starlette on uvicorn) only parses, queues and streams.
"""
