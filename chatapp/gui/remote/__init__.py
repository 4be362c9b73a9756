"""The window and other machines: File > Connect to server, and Serve this model."""
