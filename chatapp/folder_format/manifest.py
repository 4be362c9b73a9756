"""The manifest a conversion writes into its folder (convert/converter.py): the source GGUF, the
options and every file with its hash. The engine reads it too (sampling defaults), and a folder
without one was not made by chatapp (convert/output_folder.py)."""

from __future__ import annotations

MANIFEST_FILE = "chatapp-manifest.json"
