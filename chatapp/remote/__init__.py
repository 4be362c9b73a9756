"""A client for any OpenAI-compatible server (vLLM, llama.cpp's server, `chatapp serve`).

No Qt here. `RemoteEngine.chat` is driven like `Engine.chat` from a worker thread: iterate
the returned generation for per-token events; its `stats` are a RunStats measured on this
side of the network (docs/server.md says what that means for each figure).
"""
