"""A module listed as a tool module that forgot register(registry)."""

VALUE = 1
