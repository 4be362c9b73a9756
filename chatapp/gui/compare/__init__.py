"""The comparison view: both loops on one prompt, charts, sweep, and the report writer."""
