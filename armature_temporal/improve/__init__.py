"""The improvement loop: diagnose a spec from its traces, propose changes, verify them."""
