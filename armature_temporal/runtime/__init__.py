"""The run-time core that the interpreter workflow and the activities share.

Pure, deterministic helpers and the messages that cross Temporal: ``models`` (every workflow and
activity input and result), ``prompts`` (stage variables and chat messages), ``parsing`` and
``simulate`` (output checking; the offline simulator), ``llm`` (the litellm gateway, imported
lazily), ``policy`` and ``hooks`` (the safety policy and user hooks), ``fanout`` (partitioning
and fan-in), ``traces`` (the hash-chained trace records), ``hqs`` and ``stats`` (scoring),
``payloads`` (the data converter and large-payload storage) and ``search_attributes``.
"""

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
