"""The chat: transcript and prompt box, side panel, and the controller that submits its jobs."""
