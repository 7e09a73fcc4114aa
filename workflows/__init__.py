"""Deterministic Temporal workflow code: the spec interpreter and its loops."""
