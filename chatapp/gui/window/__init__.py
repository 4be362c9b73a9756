"""The window's frame: its menus, status bar, View options and Help > Where is my data."""
