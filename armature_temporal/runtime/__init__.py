"""The run-time core that the interpreter workflow and the activities share.

Pure, deterministic helpers and the messages that cross Temporal: ``models`` (every workflow and
activity input and result), ``prompts`` (stage variables and chat messages), ``parsing`` and
``simulate`` (output checking; the offline simulator), ``llm`` (the litellm gateway, imported
lazily), ``policy`` and ``hooks`` (the safety policy and user hooks), ``fanout`` (partitioning
and fan-in), ``traces`` (the hash-chained trace records), ``hqs`` and ``stats`` (scoring),
``payloads`` (the data converter and large-payload storage) and ``search_attributes``.

The names below load on first use: a command that needs only a light module of this package
(``private``, ``search_attributes``) does not pay for the models, the compiler and HQS.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from armature_temporal.runtime.hqs import HQSBreakdown, run_hqs
    from armature_temporal.runtime.models import GateDecision, RunInput, RunResult, RunStatus
    from armature_temporal.runtime.traces import TraceChain, TraceRecord

__all__ = [
    "GateDecision",
    "HQSBreakdown",
    "RunInput",
    "RunResult",
    "RunStatus",
    "TraceChain",
    "TraceRecord",
    "run_hqs",
]

_HOME = {
    "HQSBreakdown": "hqs",
    "run_hqs": "hqs",
    "GateDecision": "models",
    "RunInput": "models",
    "RunResult": "models",
    "RunStatus": "models",
    "TraceChain": "traces",
    "TraceRecord": "traces",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'armature_temporal.runtime' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"armature_temporal.runtime.{_HOME[name]}"), name)
    globals()[name] = value
    return value
