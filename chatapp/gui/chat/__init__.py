"""The chat: transcript and prompt box, side panel, the controller and the generation worker."""
