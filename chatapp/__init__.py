"""chatapp: chat with small local language models on ONNX Runtime."""

__version__ = "0.1.0"
