"""MACs on the rows people read and act on beside the trace chain: gate decisions (who decided,
shown by ``armature report`` and ``/ui``) and improvement proposals (``armature proposals``,
which writes a verified change into a spec file).

Both tables are written by Armature only, so anyone who can write the database but cannot read
the trace key could otherwise edit who decided a gate, or forge a proposal that is consistent
with itself (verdict ``verified``, lane ``auto``) and have it applied. Each row carries an
HMAC-SHA256 over every column that is shown or acted on, under a key derived from the trace key
for that table alone (:meth:`TraceKey.derived`), tagged with that key's id. A reader checks it:
a row whose MAC does not check, or that has none (written before migration 17), is shown as
unverified, never as trusted, and ``armature proposals apply`` refuses such a proposal unless
told ``--force``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from armature_temporal.improve.models import Proposal
from armature_temporal.store.keys import TraceKey, canonical, key_id_of

__all__ = [
    "GATE_ROW_FIELDS",
    "GateRecord",
    "gate_record",
    "gate_row_mac",
    "proposal_problem",
    "proposal_row_mac",
]

#: The gate_decisions columns its MAC covers (all but the id and the MAC).
GATE_ROW_FIELDS = (
    "run_id",
    "stage_id",
    "decision",
    "decided_by",
    "comment",
    "decided_at",
    "claimed_by",
    "unverified",
)


@dataclass(frozen=True)
class GateRecord:
    """A gate decision as the store has it, and whether its row checks.

    ``decided_by`` is who decided as the run recorded it (``signal``: nobody proved who);
    ``claimed_by`` what an unauthenticated sender claimed; ``unverified`` why the proof it
    sent did not check. ``record_problem`` is None when the row's MAC checks, else why it
    cannot be trusted (edited, no MAC, no key here).
    """

    run_id: str
    stage_id: str
    decision: str
    decided_by: str | None
    comment: str | None
    decided_at: str
    claimed_by: str | None
    unverified: str | None
    record_problem: str | None

    @property
    def trusted(self) -> bool:
        return self.record_problem is None


def gate_row_mac(key: TraceKey, row: Mapping[Any, Any]) -> str:
    """The MAC a gate_decisions row carries."""
    return key.derived("gate-row").tagged(
        "gate_row", canonical({f: row.get(f) for f in GATE_ROW_FIELDS})
    )


def gate_record(key: TraceKey | None, row: Mapping[Any, Any]) -> GateRecord:
    """A stored gate_decisions row (a mapping of its columns), checked."""
    values: dict[str, Any] = {f: row.get(f) for f in GATE_ROW_FIELDS}
    problem = _problem(key, row.get("mac"), "gate-row", "gate_row", canonical(values))
    return GateRecord(**values, record_problem=problem)


def _proposal_payload(proposal: Proposal, status_changed_at: str | None) -> str:
    return canonical({**proposal.model_dump(mode="json"), "status_changed_at": status_changed_at})


def proposal_row_mac(key: TraceKey, proposal: Proposal, status_changed_at: str | None) -> str:
    """The MAC an improvement_proposals row carries: over the whole proposal (its texts,
    changes, figures, verdict, lane, status) and when its status last changed."""
    return key.derived("proposal-row").tagged(
        "proposal_row", _proposal_payload(proposal, status_changed_at)
    )


def proposal_problem(
    key: TraceKey | None, proposal: Proposal, status_changed_at: str | None, mac: str | None
) -> str | None:
    """None when a stored proposal's MAC checks, else why it cannot be trusted."""
    return _problem(
        key, mac, "proposal-row", "proposal_row", _proposal_payload(proposal, status_changed_at)
    )


def _problem(
    key: TraceKey | None, mac: str | None, purpose: str, kind: str, payload: str
) -> str | None:
    if mac is None:
        return "it has no MAC (stored before this release, or inserted by hand)"
    if key is None:
        return "there is no trace key here ($ARMATURE_HOME/trace.key) to check its MAC with"
    derived = key.derived(purpose)
    if derived.checks(mac, kind, payload):
        return None
    made_with = key_id_of(mac)
    if made_with is not None and made_with != derived.key_id:
        return (
            f"its MAC was made with another trace key (key id {made_with}, this one gives "
            f"{derived.key_id})"
        )
    return "its MAC does not match its content: it was changed after it was written"
