"""`chatapp bench`: both loops on one prompt, the peers beside them (llama.cpp, onnxruntime-genai),
the physical floor of a step, and the report."""
