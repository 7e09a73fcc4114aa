"""Re-deriving a stored proposal before it is written to a spec file.

A proposal in the store carries the text to write (``spec_text``) beside what it claims to
change (``changes``, the ``diff`` that ``armature proposals show`` prints, and the two spec
hashes). Anyone who can write the database can make those disagree: a one-line temperature
diff shown, a hidden shell stage written. So ``proposals apply`` never trusts ``spec_text``: it
applies the recorded changes to the base text itself, and refuses unless the result is the
stored text, compiles to the recorded candidate hash, and makes the recorded diff.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Literal

from armature_temporal.errors import ArmatureError, SpecError
from armature_temporal.improve.edit import EditError, apply_changes, unified_diff
from armature_temporal.improve.models import Proposal
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text

__all__ = [
    "MismatchKind",
    "ProposalMismatch",
    "ProposalUnverified",
    "rederive",
    "refuse_unverified",
]


MismatchKind = Literal["unappliable", "base_hash", "text", "candidate_hash", "diff"]


class ProposalMismatch(ArmatureError):
    """A stored proposal is not what its own changes make: it was altered in the store.

    ``kind`` says what differs (``unappliable``: the changes do not apply to the base text,
    or the result does not compile, e.g. a file it includes is not found from here).
    """

    def __init__(self, what: str, kind: MismatchKind, fix: str) -> None:
        super().__init__(f"{what}; {fix}")
        self.what = what
        self.kind: MismatchKind = kind


class ProposalUnverified(ArmatureError):
    """A stored proposal's record does not verify (its MAC does not check, or it has none):
    it cannot be told from one forged in the store, so it is not acted on unless forced."""


def refuse_unverified(proposal_id: str, problem: str | None) -> None:
    """Raise :class:`ProposalUnverified` when the proposal's record did not verify
    (``problem``: why, from the store's check; None: it verified)."""
    if problem is None:
        return
    raise ProposalUnverified(
        f"proposal {proposal_id}: its record in the store does not verify ({problem}); "
        "nothing was written. It may have been forged or edited by someone who can write the "
        "trace database: check the store with `armature traces verify`, dismiss it "
        f"(`armature proposals dismiss {proposal_id}`) and run `armature improve` again for a "
        "proposal you can trust; --force applies it anyway"
    )


def _first_difference(expected: str, stored: str, limit: int = 6) -> str:
    lines = [
        line.rstrip("\n")
        for line in difflib.unified_diff(
            expected.splitlines(keepends=True),
            stored.splitlines(keepends=True),
            fromfile="re-derived",
            tofile="stored",
            n=0,
        )
        if not line.startswith(("---", "+++", "@@"))
    ]
    shown = "; ".join(repr(line) for line in lines[:limit])
    more = f" (and {len(lines) - limit} more)" if len(lines) > limit else ""
    return shown + more


def _body(diff: str) -> list[str]:
    """A unified diff without its file header lines (which name the path it was made on)."""
    return [line for line in diff.splitlines() if not line.startswith(("--- ", "+++ "))]


def rederive(proposal: Proposal, *, filename: str, base_dir: Path | None) -> str:
    """The candidate text made from ``proposal.base_spec_text`` and its ``changes``.

    Raises:
        ProposalMismatch: naming the proposal and what differs — the base text's hash, the
            changes that no longer apply, the stored text (with its first differing lines),
            the candidate's hash, or the diff ``proposals show`` prints — and what to do.
    """
    pid = proposal.id
    fix = (
        "nothing was written. The row was changed in the store after the improvement loop "
        "made it: dismiss it (`armature proposals dismiss " + pid + "`), run `armature "
        "improve` again, and check who can write the trace database"
    )
    try:
        base_hash = compile_spec(
            load_spec_text(proposal.base_spec_text, filename, base_dir=base_dir)
        ).spec_hash
        candidate = apply_changes(
            proposal.base_spec_text, proposal.changes, filename=filename, base_dir=base_dir
        )
        candidate_hash = compile_spec(
            load_spec_text(candidate, filename, base_dir=base_dir)
        ).spec_hash
    except (EditError, SpecError) as exc:
        raise ProposalMismatch(
            f"proposal {pid}: its recorded changes do not apply to its recorded base text ({exc})",
            "unappliable",
            fix,
        ) from None
    if base_hash != proposal.base_spec_hash:
        raise ProposalMismatch(
            f"proposal {pid}: its base text compiles to spec_hash {base_hash[:12]}, the "
            f"proposal records {proposal.base_spec_hash[:12]}",
            "base_hash",
            fix,
        )
    if candidate != proposal.spec_text:
        raise ProposalMismatch(
            f"proposal {pid}: the text it would write is not what its changes make "
            f"(re-derived vs stored: {_first_difference(candidate, proposal.spec_text)})",
            "text",
            fix,
        )
    if candidate_hash != proposal.candidate_spec_hash:
        raise ProposalMismatch(
            f"proposal {pid}: its changes compile to spec_hash {candidate_hash[:12]}, the "
            f"proposal records {proposal.candidate_spec_hash[:12]}",
            "candidate_hash",
            fix,
        )
    if _body(unified_diff(proposal.base_spec_text, candidate, filename)) != _body(proposal.diff):
        raise ProposalMismatch(
            f"proposal {pid}: the diff `armature proposals show` prints is not the change its "
            f"changes make",
            "diff",
            fix,
        )
    return candidate
