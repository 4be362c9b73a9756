"""The command line: no subcommand starts the desktop app (`chatapp.cli.main`)."""

from chatapp.cli.main import main

__all__ = ["main"]
