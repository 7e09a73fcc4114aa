"""Verified changes at the end of a round: the auto lane may write itself into the spec file
(``self_improvement.auto_apply``); the review lane is written to ``<spec>.pending.yaml`` beside
it, never over it, for ``armature improve SPEC --apply-pending`` after a person looked.

The pending file is the candidate spec text under a comment header naming the proposal, its
evidence, and the sha256 and spec_hash of the text it was made from; promoting it refuses when
the live spec is no longer that text.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from armature_temporal.errors import ArmatureError, SpecError
from armature_temporal.improve.apply import ProposalMismatch, rederive
from armature_temporal.improve.models import AppliedChange, Proposal, Settled
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text

__all__ = [
    "PendingError",
    "PendingFile",
    "applied_record",
    "pending_path",
    "read_pending",
    "settle",
    "write_atomically",
    "write_pending",
]

_END = "# --- end of the armature header; the spec follows ---\n"


class PendingError(ArmatureError):
    """A pending file cannot be promoted: there is none, it is not one, or it is stale."""


@dataclass(frozen=True)
class PendingFile:
    path: Path
    proposal_id: str
    base_sha256: str
    base_spec_hash: str
    text: str  # the spec text under the header


def pending_path(spec: Path) -> Path:
    """``specs/x.yaml`` → ``specs/x.pending.yaml``."""
    return spec.with_name(f"{spec.stem}.pending{spec.suffix or '.yaml'}")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.armature-tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def applied_record(proposal: Proposal, spec: Path) -> AppliedChange:
    """What the store keeps when ``proposal`` was written to ``spec``: the next round checks
    its predictions against the version it made (``TraceStore.record_applied``)."""
    return AppliedChange(
        proposal_id=proposal.id,
        spec_name=proposal.spec_name,
        spec_hash=proposal.candidate_spec_hash,
        base_spec_hash=proposal.base_spec_hash,
        applied_at=datetime.now(UTC).isoformat(),
        path=str(spec.resolve()),
    )


def write_pending(spec: Path, proposal: Proposal, candidate: str) -> Path:
    """Write ``candidate`` (the proposal's re-derived text) to the spec's pending file."""
    path = pending_path(spec)
    header = [
        f"# Pending change to {spec.name}, held for review (review lane): it was verified but",
        "# changes what only a person may approve. Nothing below is live until you run:",
        f"#   armature improve {spec} --apply-pending",
        f"# proposal: {proposal.id} (round {proposal.improve_run_id}, {proposal.created_at[:19]})",
        f"# evidence: {_one_line(proposal.detail)}",
    ]
    header += [f"# why review: {_one_line(r)}" for r in proposal.lane_reasons]
    header += [
        f"# base-sha256: {_sha(proposal.base_spec_text)}",
        f"# base-spec-hash: {proposal.base_spec_hash}",
        _END,
    ]
    write_atomically(path, "\n".join(header[:-1]) + "\n" + _END + candidate)
    return path


def read_pending(spec: Path) -> PendingFile:
    """The spec's pending file, parsed. Raises PendingError naming what is missing."""
    path = pending_path(spec)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PendingError(
            f"no pending change for {spec}: {path} does not exist. A round writes one when it "
            f"verifies a review-lane change; run `armature improve {spec}`"
        ) from None
    head, sep, text = raw.partition(_END)
    fields = {}
    for line in head.splitlines():
        key, colon, value = line.removeprefix("# ").partition(": ")
        if colon:
            fields[key] = value.strip()
    if not sep or not {"proposal", "base-sha256", "base-spec-hash"} <= fields.keys():
        raise PendingError(
            f"{path} is not a pending file armature wrote (its header is missing or altered); "
            f"delete it and run `armature improve {spec}` again"
        )
    return PendingFile(
        path=path,
        proposal_id=fields["proposal"].split(" ", 1)[0],
        base_sha256=fields["base-sha256"],
        base_spec_hash=fields["base-spec-hash"],
        text=text,
    )


def check_fresh(spec: Path, pending: PendingFile, current: str) -> None:
    """Raise PendingError unless the live spec is the text the pending change was made from."""
    if _sha(current) == pending.base_sha256:
        return
    try:
        now = compile_spec(load_spec_text(current, str(spec), base_dir=spec.parent)).spec_hash
    except SpecError:
        now = "(does not compile)"
    raise PendingError(
        f"{spec} changed since {pending.path.name} was made from it (spec_hash now "
        f"{now[:12]}, the pending change was made from {pending.base_spec_hash[:12]}); nothing "
        f"was written. Run `armature improve {spec}` again for a change to the spec as it is"
    )


def settle(spec: Path, base_text: str, proposals: list[Proposal], store: object) -> Settled:
    """End of a round: apply the best verified auto-lane proposal when the spec asks for it,
    else (and always for the review lane) leave it for a person. ``store`` marks what applied.

    Best = highest lower bound of the paired interval. One change per round: the others were
    made from the same base and were not verified together.
    """
    notes: list[str] = []
    loaded = load_spec_text(base_text, str(spec), base_dir=spec.parent)
    si = loaded.spec.self_improvement
    auto_apply = bool(si and si.auto_apply)
    verified = sorted(
        (p for p in proposals if p.verdict == "verified" and p.status == "proposed"),
        key=lambda p: -p.ci_low,
    )
    if not verified:
        return Settled()
    try:
        current = spec.read_text(encoding="utf-8")
    except OSError as exc:
        return Settled(notes=[f"cannot read {spec} ({exc.strerror}); nothing written"])
    if current != base_text:
        return Settled(
            notes=[
                f"{spec} is not the text this round started from (it changed while the round "
                "ran, or a schedule carries an older text: `armature schedule` it again); "
                "nothing written"
            ]
        )
    result = Settled()
    autos = [p for p in verified if p.lane == "auto"]
    reviews = [p for p in verified if p.lane == "review"]
    if autos and auto_apply:
        best = autos[0]
        try:
            text = rederive(best, filename=str(spec), base_dir=spec.parent)
        except ProposalMismatch as exc:
            notes.append(f"{best.id} not applied: {exc}")
        else:
            write_atomically(spec, text)
            try:
                store.set_proposal_status(best.id, "applied")  # type: ignore[attr-defined]
            except ArmatureError as exc:
                write_atomically(spec, current)
                notes.append(f"{best.id} not applied: {exc}; {spec} left as it was")
            else:
                store.record_applied(applied_record(best, spec))  # type: ignore[attr-defined]
                result = result.model_copy(update={"applied": best.id})
                notes.append(
                    f"{best.id} written to {spec}: runs from the file are a new version; "
                    "schedules keep the text they were given until `armature schedule` runs"
                )
    elif autos:
        notes.append(
            f"{len(autos)} verified auto-lane change(s) left as proposals "
            "(self_improvement.auto_apply is false): `armature proposals apply`"
        )
    if reviews and result.applied is not None:
        notes.append(
            f"review-lane {reviews[0].id} not written to {pending_path(spec).name}: {spec} "
            "changed this round; the next round proposes it again on the new version"
        )
    elif reviews:
        best = reviews[0]
        try:
            text = rederive(best, filename=str(spec), base_dir=spec.parent)
        except ProposalMismatch as exc:
            notes.append(f"{best.id} not written: {exc}")
        else:
            path = write_pending(spec, best, text)
            result = result.model_copy(update={"pending": best.id, "pending_path": str(path)})
    return result.model_copy(update={"notes": notes})
