"""Models from the Hugging Face Hub, when the user asks: search, the GGUF files of a repository
with what this computer can run, and resumable, checked downloads into the models folder. No Qt.

Nothing here touches the network on import or on its own: every request starts from a call the
window's "Get models" dialog or `chatapp pull` / `chatapp search` makes. `huggingface_hub` is
imported inside the functions that ask the hub (docs/hub.md).
"""
