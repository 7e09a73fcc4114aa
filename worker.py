"""Builds the Temporal worker that runs Armature workflows and activities."""
