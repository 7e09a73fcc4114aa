"""Temporal activities: thin wrappers over the core, one module per family."""
