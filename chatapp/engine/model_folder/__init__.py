"""Reading a converted model folder: its files, config values, graphs (variants), the decoder's
inputs and outputs, and the sampling it starts with. No Qt."""
