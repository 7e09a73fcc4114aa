"""The ``verify_gate_decision`` local activity: who decided a gate, as the proof the decision
carries vouches (:mod:`armature_temporal.runtime.gate_auth`).

A local activity of the interpreter on the workflow worker, which holds the trace key; the
workflow itself never sees a key. The result is recorded in the run's history, so a replay
takes the same ``by`` without checking again.
"""

from __future__ import annotations

import asyncio

from temporalio import activity

from armature_temporal.runtime.gate_auth import check_decision
from armature_temporal.runtime.models import GateProofCheck, GateProofResult
from armature_temporal.store.keys import load_key

__all__ = ["verify_gate_decision"]


@activity.defn(name="verify_gate_decision")
async def verify_gate_decision(check: GateProofCheck) -> GateProofResult:
    """The authenticated decider of ``check.decision``, or None and why not."""
    key = await asyncio.to_thread(load_key, create=False)
    return check_decision(key, check.run_id, check.decision, check.waiting_since)
