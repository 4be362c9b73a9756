"""Pieces every GUI feature uses: the Qt work-arounds, the message banner, settings."""
