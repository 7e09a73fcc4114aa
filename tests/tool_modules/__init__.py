"""Tool modules in the armature-agents 0.7.0 style, loaded by tests/unit/test_tool_modules.py."""
