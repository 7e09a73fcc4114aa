"""Who decided a gate: proofs made by the side that authenticated the caller, checked by the
worker.

Temporal's frontend authenticates nobody here, and an update or signal does not say who sent
it, so a gate decision's ``by`` cannot be taken from its payload: anything that reaches the
frontend (a tool program, say) could claim to be anyone. The sides that do authenticate their
caller — the CLI (the OS user), the run API and ``/ui`` (the token's name) and the library (the
OS user) — run where the trace key is (``$ARMATURE_HOME/trace.key``, which tool programs
cannot read). They attach a :class:`~armature_temporal.runtime.models.DecisionProof`: an
HMAC-SHA256, under a key derived from the trace key for this purpose only, over the run's
workflow id, the gate, the decision, the comment, ``by``, when it was made and a nonce. The
run's worker checks it in the ``verify_gate_decision`` local activity (workflow code holds no
key) and records ``by`` from a proof that checks, else ``by="signal"``.

A proof names its run and gate, so one captured from a history does not check for another run
or gate; it must be made while the gate waits (allowing :data:`CLOCK_SKEW_S` of skew between
the two machines' clocks), so it does not check for an earlier or a later wait either. A gate
is decided once (the update's validator refuses a second decision), which makes a proof good
for one decision.
"""

from __future__ import annotations

import hmac
import os
import pwd
import secrets
from datetime import UTC, datetime, timedelta

from armature_temporal.runtime.models import (
    UNAUTHENTICATED,
    DecisionProof,
    GateDecision,
    GateProofResult,
)
from armature_temporal.store.keys import TraceKey, canonical, key_id_of

__all__ = [
    "CLOCK_SKEW_S",
    "PURPOSE",
    "UNAUTHENTICATED",
    "check_decision",
    "os_user",
    "sign_decision",
]

#: What the derived key is for (:meth:`TraceKey.derived`).
PURPOSE = "gate-decision"
#: How far apart the signing machine's clock and the run's may be.
CLOCK_SKEW_S = 300.0


def os_user() -> str:
    """Who this process runs as, by the uid the kernel gave it (not ``$USER`` or
    ``$LOGNAME``, which anyone sets): the name the CLI and the library decide gates as.
    ``uid:N`` for a uid with no account name (a container's arbitrary uid)."""
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid:{uid}"


def _message(
    run_id: str, decision: GateDecision, by: str | None, issued_at: str, nonce: str
) -> str:
    return canonical(
        {
            "run": run_id,
            "gate": decision.stage,
            "decision": decision.decision,
            "comment": decision.comment,
            "by": by,
            "issued_at": issued_at,
            "nonce": nonce,
        }
    )


def sign_decision(
    key: TraceKey, run_id: str, decision: GateDecision, *, now: datetime | None = None
) -> GateDecision:
    """``decision`` (whose ``by`` the caller authenticated) with a proof for run ``run_id``."""
    issued_at = (now or datetime.now(UTC)).isoformat()
    nonce = secrets.token_hex(16)
    mac = key.derived(PURPOSE).tagged(
        "gate_decision", _message(run_id, decision, decision.by, issued_at, nonce)
    )
    return decision.model_copy(
        update={"proof": DecisionProof(issued_at=issued_at, nonce=nonce, mac=mac)}
    )


def check_decision(
    key: TraceKey | None,
    run_id: str,
    decision: GateDecision,
    waiting_since: str,
    *,
    now: datetime | None = None,
) -> GateProofResult:
    """Whether ``decision`` (as the run received it: the claimed name in ``claimed_by``) has
    a proof for this run, this gate and this wait. ``by`` of the result is the authenticated
    decider; None with ``problem`` saying why not."""
    proof = decision.proof
    claimed = decision.claimed_by
    if proof is None:
        return GateProofResult(problem="no proof was sent")
    if key is None:
        return GateProofResult(
            problem="this worker has no trace key ($ARMATURE_HOME/trace.key) to check the "
            "proof with; the workers and whatever decides gates (CLI, armature serve) must "
            "share one"
        )
    derived = key.derived(PURPOSE)
    expected = derived.tagged(
        "gate_decision", _message(run_id, decision, claimed, proof.issued_at, proof.nonce)
    )
    if not hmac.compare_digest(proof.mac, expected):
        made_with = key_id_of(proof.mac)
        if made_with is not None and made_with != derived.key_id:
            return GateProofResult(
                problem=f"the proof was made with another trace key (key id {made_with}; this "
                f"worker's gives {derived.key_id}); the workers and whatever decides gates "
                "(CLI, armature serve) must share one trace key"
            )
        return GateProofResult(
            problem="the proof does not match this run, gate, decision, comment and name "
            "(made for another, or altered)"
        )
    try:
        issued = datetime.fromisoformat(proof.issued_at)
        since = datetime.fromisoformat(waiting_since)
    except ValueError:
        return GateProofResult(problem=f"the proof's time {proof.issued_at!r} is not ISO 8601")
    skew = timedelta(seconds=CLOCK_SKEW_S)
    if issued.tzinfo is None or issued < since - skew:
        return GateProofResult(
            problem=f"the proof was made at {proof.issued_at}, before this gate began to wait "
            f"({waiting_since}): it is for an earlier wait"
        )
    if issued > (now or datetime.now(UTC)) + skew:
        return GateProofResult(
            problem=f"the proof's time {proof.issued_at} is in the future (more than "
            f"{CLOCK_SKEW_S:g} s ahead of this worker's clock)"
        )
    if not claimed:
        return GateProofResult(problem="the proof names nobody")
    return GateProofResult(by=claimed)
