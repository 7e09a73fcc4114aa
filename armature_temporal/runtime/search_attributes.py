"""The search attributes Armature puts on runs, so the Web UI and `armature gates` can find them."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

__all__ = ["SEARCH_ATTRIBUTE_NAMES", "SPEC_HASH", "SPEC_NAME", "WAITING_GATE", "dev_server_flags"]

SPEC_NAME = SearchAttributeKey.for_keyword("ArmatureSpecName")
SPEC_HASH = SearchAttributeKey.for_keyword("ArmatureSpecHash")
WAITING_GATE = SearchAttributeKey.for_bool("ArmatureWaitingGate")

SEARCH_ATTRIBUTE_NAMES = [SPEC_NAME.name, SPEC_HASH.name, WAITING_GATE.name]
ALL_KEYS = (SPEC_NAME, SPEC_HASH, WAITING_GATE)


def dev_server_flags() -> list[str]:
    """``--search-attribute NAME=Type`` flags for ``temporal server start-dev``."""
    flags = []
    for key in ALL_KEYS:
        kind = "Keyword" if key.value_type is str else "Bool"
        flags += ["--search-attribute", f"{key.name}={kind}"]
    return flags
