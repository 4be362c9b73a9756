"""Errors the command line reports as one line (exit code 2)."""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; printed as one line, exit code 2."""
