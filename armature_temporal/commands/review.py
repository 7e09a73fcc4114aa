"""What the learning loops keep, reviewed and acted on: ``armature proposals`` (the
improvement loop's spec changes) and ``armature adapters`` (the fine-tune loop's LoRA
adapters). Both read and update the trace store only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    LEARN,
    JsonFlag,
    OptionalSpecNameArg,
    err,
    fail,
    one_spec,
    open_store,
    out,
    print_json,
)
from armature_temporal.errors import ArmatureError, did_you_mean

app = typer.Typer()


proposals_app = typer.Typer(
    help="Review the improvement loop's proposals, and apply or dismiss them.",
    no_args_is_help=True,
)
app.add_typer(proposals_app, name="proposals", rich_help_panel=LEARN)


def _which_spec(path: Path, expected: str) -> str:
    """Why a file is not a proposal's base: another spec, or this one changed since."""
    from armature_temporal.errors import SpecError
    from armature_temporal.spec.loader import load_spec

    try:
        name = load_spec(path).spec.name
    except SpecError:
        return "it changed since, or it is another file"
    if name != expected:
        return f"it is another spec ({name!r})"
    return "it changed since"


def _proposal_or_exit(store: Any, proposal_id: str) -> Any:
    """The stored proposal (a ``StoredProposal``: the proposal, and whether its record
    verifies), or exit 2 naming the id."""
    found = store.stored_proposal(proposal_id)
    if found is None:
        known = [p.id for p in store.proposals(limit=200)]
        raise fail(
            f"error: no proposal {proposal_id!r}; list them with `armature proposals list`"
            + did_you_mean(proposal_id, known),
            2,
        )
    return found


@proposals_app.command("list")
def proposals_list(
    spec_arg: OptionalSpecNameArg = None,
    spec: Annotated[
        str | None, typer.Option("--spec", help="Only this spec's (a file or a name).")
    ] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="proposed, applied or dismissed.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List proposals, newest first, with their verdict and measured HQS change (of one spec:
    `armature proposals list SPEC`, a spec file or name)."""
    if status is not None and status not in ("proposed", "applied", "dismissed"):
        raise fail(f"error: --status {status!r}: use proposed, applied or dismissed", 2)
    spec = one_spec(spec_arg, spec)
    store, where = open_store()
    try:
        stored = store.stored_proposals(spec=spec, status=status, limit=limit)
    finally:
        store.close()
    if as_json:
        print_json(
            [
                {
                    **s.proposal.model_dump(mode="json", exclude={"spec_text", "base_spec_text"}),
                    "record_verified": s.trusted,
                    "record_problem": s.record_problem,
                }
                for s in stored
            ]
        )
        return
    if not stored:
        out.print(
            f"no proposals in the store at {where}; `armature improve SPEC` makes some",
            markup=False,
        )
        return
    from armature_temporal.improve.render import render_proposals

    unverified = [s.proposal.id for s in stored if not s.trusted]
    out.print(render_proposals([s.proposal for s in stored], unverified))
    if unverified:
        err.print(
            f"warning: the record of {', '.join(unverified)} does not verify (`armature "
            "proposals show ID` says why); `armature proposals apply` refuses them",
            markup=False,
        )


@proposals_app.command("show")
def proposals_show(
    proposal_id: Annotated[str, typer.Argument(help="The proposal id.", metavar="ID")],
    as_json: JsonFlag = False,
) -> None:
    """Show a proposal: the change, the evidence behind it, the paired scores and the diff."""
    store, _ = open_store()
    try:
        stored = _proposal_or_exit(store, proposal_id)
    finally:
        store.close()
    found = stored.proposal
    from armature_temporal.improve.apply import ProposalMismatch, rederive

    if not stored.trusted:
        err.print(
            f"warning: proposal {found.id}: its record in the store does not verify "
            f"({stored.record_problem}): what follows may be forged; `armature proposals "
            "apply` refuses it",
            markup=False,
        )
    mismatch: str | None = None
    try:  # what is shown must be what apply would write
        rederive(found, filename=f"<proposal {found.id}>", base_dir=Path.cwd())
    except ProposalMismatch as exc:
        if exc.kind == "unappliable":  # perhaps only a file the spec includes, not found here
            err.print(
                f"note: {exc.what}, here (a file the spec includes may be elsewhere); "
                "`armature proposals apply` checks it against the spec file",
                markup=False,
            )
        else:
            mismatch = str(exc)
            err.print(f"warning: {mismatch}; `armature proposals apply` refuses it", markup=False)
    if as_json:
        print_json(
            {
                **found.model_dump(mode="json"),
                "mismatch": mismatch,
                "record_verified": stored.trusted,
                "record_problem": stored.record_problem,
            }
        )
        return
    from armature_temporal.improve.render import render_proposal

    out.print(render_proposal(found))


@proposals_app.command("apply")
def proposals_apply(
    proposal_id: Annotated[str, typer.Argument(help="The proposal id.", metavar="ID")],
    spec: Annotated[
        Path,
        typer.Argument(help="The spec file to write it to.", show_default=False, metavar="SPEC"),
    ],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Apply a proposal whose change was not verified, or whose record in the "
            "store does not verify.",
        ),
    ] = False,
) -> None:
    """Write a proposal's change into the spec file (only if the file is exactly the text the
    proposal was made from), and mark it applied. Runs after this are a new spec version.

    The proposal's record must verify (its MAC, made with the trace key, checks): one that
    does not — edited or forged in the store, or stored before MACs — is refused unless
    --force (exit 1). The text written is re-derived: the proposal's recorded changes applied
    to its base text. A proposal whose stored text, spec hashes or diff disagree with that (it
    was altered in the store) is refused, saying what differs; nothing is written then
    (exit 1)."""
    import os

    from armature_temporal.improve.apply import ProposalUnverified, refuse_unverified

    store, _ = open_store()
    try:
        stored = _proposal_or_exit(store, proposal_id)
        found = stored.proposal
        if not force:
            try:
                refuse_unverified(proposal_id, stored.record_problem)
            except ProposalUnverified as exc:
                raise fail(f"error: {exc}", 1) from None
        elif not stored.trusted:
            err.print(
                f"warning: proposal {proposal_id}: its record does not verify "
                f"({stored.record_problem}); applying it because of --force",
                markup=False,
            )
        try:
            current = spec.read_text(encoding="utf-8")
        except OSError as exc:
            raise fail(f"error: cannot read {spec}: {exc.strerror}", 2) from None
        # The file first: applying to the wrong file says so, whatever the proposal's status.
        if current == found.spec_text and found.status == "applied":
            raise fail(
                f"error: proposal {proposal_id} is already applied: {spec} has its change; "
                "nothing changed",
                2,
            )
        if current != found.base_spec_text:
            raise fail(
                f"error: {spec} is not the text proposal {proposal_id} was made from (spec "
                f"{found.spec_name!r}, spec_hash {found.base_spec_hash[:12]}): "
                f"{_which_spec(spec, found.spec_name)}. Run `armature improve` on it again; "
                "nothing was written",
                2,
            )
        if found.status != "proposed":
            raise fail(
                f"error: proposal {proposal_id} is already {found.status}; nothing changed", 2
            )
        if found.verdict != "verified" and not force:
            raise fail(
                f"error: proposal {proposal_id} was not verified ({found.verdict}: "
                f"{found.detail}); pass --force to apply it anyway",
                2,
            )
        from armature_temporal.improve.apply import ProposalMismatch, rederive

        try:  # never the stored spec_text as it is: what the recorded changes make of the base
            candidate = rederive(found, filename=str(spec), base_dir=spec.parent)
        except ProposalMismatch as exc:
            raise fail(f"error: {exc}", 1) from None
        tmp = spec.with_name(f".{spec.name}.armature-tmp")
        tmp.write_text(candidate, encoding="utf-8")
        os.replace(tmp, spec)
        try:
            store.set_proposal_status(proposal_id, "applied")
        except ArmatureError as exc:
            tmp.write_text(current, encoding="utf-8")
            os.replace(tmp, spec)
            raise fail(f"error: {exc}; {spec} left as it was", 1) from None
        from armature_temporal.improve.pending import applied_record

        # The next round checks this change's predictions against the version it made.
        store.record_applied(applied_record(found, spec))
    finally:
        store.close()
    for change in found.changes:
        from armature_temporal.improve.render import change_label

        out.print(f"applied {proposal_id} to {spec}: {change_label(change)}", markup=False)
    out.print(
        f"spec_hash {found.candidate_spec_hash[:12]}: runs started from this file are a new "
        "version; schedules and `armature serve` keep the plan they were given until you run "
        "`armature schedule` / restart `armature serve` with it",
        markup=False,
    )


@proposals_app.command("dismiss")
def proposals_dismiss(
    proposal_id: Annotated[str, typer.Argument(help="The proposal id.", metavar="ID")],
) -> None:
    """Mark a proposal dismissed (kept in the store, no longer offered)."""
    store, _ = open_store()
    try:
        _proposal_or_exit(store, proposal_id)
        try:
            store.set_proposal_status(proposal_id, "dismissed")
        except ArmatureError as exc:
            raise fail(f"error: {exc}", 2) from None
    finally:
        store.close()
    out.print(f"dismissed {proposal_id}", markup=False)


adapters_app = typer.Typer(
    help="The LoRA adapters the fine-tune loop trained.", no_args_is_help=True
)
app.add_typer(adapters_app, name="adapters", rich_help_panel=LEARN)


@adapters_app.command("list")
def adapters_list(
    spec_arg: OptionalSpecNameArg = None,
    spec: Annotated[
        str | None, typer.Option("--spec", help="Only this spec's (a file or a name).")
    ] = None,
    stage: Annotated[str | None, typer.Option("--stage", help="Only this stage's.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List adapters, newest first: verdict, held-out loss with the adapter vs the base
    model's, the paired runs' mean HQS difference (with − without it) with its 95% interval
    and number of pairs, where it is. Verified: loss below the base model's and the paired
    runs no worse (non-inferiority, finetune.noninferiority_margin). The one
    `adapter: latest` loads for a stage is its newest verified active one."""
    spec = one_spec(spec_arg, spec)
    store, where = open_store()
    try:
        found = store.adapters(spec=spec, stage=stage, limit=limit)
    finally:
        store.close()
    if as_json:
        print_json([a.model_dump(mode="json") for a in found])
        return
    if not found:
        out.print(
            f"no adapters in the store at {where}; `armature finetune SPEC` trains some",
            markup=False,
        )
        return
    for a in found:
        out.print(
            f"{a.id}  {a.status}  {a.verdict}  {_adapter_figures(a)}  {_trained_on(a)}  "
            f"{a.created_at[:19]}",
            markup=False,
            highlight=False,
        )
        out.print(f"    {a.path}", markup=False, highlight=False)


def _trained_on(a: Any) -> str:
    """``trained on 12, held out 4`` (examples; a preference-tuned adapter: ``DPO on 12 pairs,
    held out 4``, then ``on an SFT reference`` when it is a delta on an SFT adapter)."""
    from armature_temporal.finetune.models import PreferenceReport

    if isinstance(a.report, PreferenceReport):
        on_sft = " on an SFT reference" if a.report.reference_adapter is not None else ""
        return f"DPO on {a.report.train_pairs} pairs, held out {a.report.eval_pairs}{on_sft}"
    return f"trained on {a.report.train_examples}, held out {a.report.eval_examples}"


def _adapter_figures(a: Any) -> str:
    """``loss 1.234 vs base 2.345  paired HQS +0.000 [-0.010, +0.010] n=8`` (an adapter from
    before the paired runs: its report's losses, ``paired: not measured``; a preference-tuned
    one: ``preference accuracy 0.900 [0.596, 0.982] vs base 0.500``)."""
    from armature_temporal.finetune.models import PreferenceReport

    if isinstance(a.report, PreferenceReport):
        r = a.report
        loss = (
            f"preference accuracy {r.accuracy:.3f} [{r.accuracy_low:.3f}, "
            f"{r.accuracy_high:.3f}] vs base 0.500"
        )
    else:
        held = a.heldout_loss if a.heldout_loss is not None else a.report.eval_loss_after
        base = a.base_loss if a.base_loss is not None else a.report.eval_loss_before
        loss = f"loss {held:.3f} vs base {base:.3f}"
    if a.paired_n is None:
        return f"{loss}  paired: not measured"
    if not a.paired_n or a.paired_diff is None:
        return f"{loss}  paired: none run"
    return (
        f"{loss}  paired HQS {a.paired_diff:+.3f} [{a.paired_ci_low:+.3f}, "
        f"{a.paired_ci_high:+.3f}] n={a.paired_n}"
    )


@adapters_app.command("retire")
def adapters_retire(
    adapter_id: Annotated[str, typer.Argument(help="The adapter id.", metavar="ID")],
) -> None:
    """Stop offering an adapter to `adapter: latest` (the files stay where they are)."""
    store, _ = open_store()
    try:
        store.set_adapter_status(adapter_id, "retired", expected="active")
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 2) from None
    finally:
        store.close()
    out.print(f"retired {adapter_id}", markup=False)
