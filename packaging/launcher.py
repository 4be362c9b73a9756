"""Entry script of the frozen app (PyInstaller runs it as __main__): the `chatapp` command."""

import sys

from chatapp.cli import main

if __name__ == "__main__":
    sys.exit(main())
