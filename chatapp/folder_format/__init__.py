"""The converted model folder as a format: what `chatapp.convert` writes and `chatapp.engine`
reads, kept below both so that neither imports the other (the manifest's name, the graph's
custom domain and the node names a session looks for). No Qt, nothing model-specific."""
