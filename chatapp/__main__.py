"""`python -m chatapp` and the `chatapp` console script."""

from __future__ import annotations

import sys

from chatapp.cli import main

if __name__ == "__main__":
    sys.exit(main())
