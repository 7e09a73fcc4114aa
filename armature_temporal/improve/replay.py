"""What the learning loops replay, and what a replay leaves out.

Every loop verifies a change with paired verification runs on inputs of past runs (improve and
optimize, memory CI, fine-tune pairs). Two rules keep those runs from overriding people:

- **Inputs a person turned down are never replayed.** :func:`rejected`: a run in which any gate
  was rejected — a stage gate or a tool, hook or adapter approval, by a person or by a gate's
  ``on_timeout: reject`` (any reject: the safe reading) — or that ended rejected.
  :func:`replay_inputs` gives such a run's inputs as None, as for a run without recorded ones.
- **A comparison uses only what both sides executed.** A verification run never approves a
  gate: the gated stage and the stages after it are skipped (``verification_gate``), and the
  latter carry ``data.verification_gate`` naming the gate (``runtime.hqs.not_executed``).
  Pair *i* of every version is scored over the same stages: those *any* of them did not
  execute are left out of all of them (:func:`left_out`), so a version that stops at a gate
  the other lacks, or runs a stage the other holds behind one, gains nothing by it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from armature_temporal.runtime.hqs import not_executed
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.views.report import RunTrace

__all__ = ["left_out", "rejected", "replay_inputs"]


def rejected(run: RunTrace) -> bool:
    """Whether a gate of ``run`` was rejected (stage gate or approval, by anyone), or the run
    ended rejected: its inputs are never replayed."""
    if run.status == "rejected":
        return True
    return any(r.kind == "gate" and r.status == "reject" for r in run.records)


def replay_inputs(run: RunTrace) -> dict[str, Any] | None:
    """The inputs a verification run may replay from ``run``: its recorded inputs, or None
    when it has none or was rejected (:func:`rejected`)."""
    return None if rejected(run) else run.inputs


def left_out(versions: Sequence[Sequence[Sequence[TraceRecord]]]) -> list[frozenset[str]]:
    """Per pair index, the stages to leave out of every version's run at that index: those
    any of them did not execute. ``versions[v][i]`` is the records of version v's run i; the
    versions' run lists are aligned by pair index."""
    n = max((len(runs) for runs in versions), default=0)
    return [
        frozenset().union(*(not_executed(runs[i]) for runs in versions if i < len(runs)))
        for i in range(n)
    ]
