"""A 0.7.0 tool module left with its 0.7.0 imports."""

from armature.registry.registry import ToolDescriptor  # type: ignore[import-not-found]  # noqa: F401


def register(registry: object) -> None:
    pass
