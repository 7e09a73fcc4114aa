"""One round of a learning loop, now: ``armature improve``, ``armature optimize`` (a round of
LLM-proposed changes only) and ``armature finetune``. Each starts a loop workflow and, by
default, waits for it, showing its phases."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    LEARN,
    AddressOpt,
    JsonFlag,
    QueueOpt,
    SpecArg,
    fail,
    load_or_exit,
    out,
    run_round,
)

app = typer.Typer()

VerifyRunsOpt = Annotated[
    int | None,
    typer.Option(
        "--verify-runs",
        min=2,
        max=100,
        help="Recent inputs to run each version on (default: the spec's "
        "self_improvement.verify_runs).",
    ),
]
WaitOpt = Annotated[bool, typer.Option("--wait/--no-wait", help="Wait for the round and print it.")]


@app.command(rich_help_panel=LEARN)
def improve(
    spec: SpecArg,
    verify_runs: VerifyRunsOpt = None,
    wait: WaitOpt = True,
    apply_pending: Annotated[
        bool,
        typer.Option(
            "--apply-pending",
            help="Run no round: show the diff of SPEC's reviewed <spec>.pending.yaml and write "
            "it over SPEC (refused if SPEC changed since it was made).",
        ),
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="With --apply-pending: do not ask first.")
    ] = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
    target: Annotated[
        str | None,
        typer.Argument(help="After `history`: the spec file or name.", metavar="SPEC"),
    ] = None,
) -> None:
    """Run one round of the improvement loop on a spec now (`armature improve history SPEC`:
    every round of it so far).

    Diagnoses the spec's current version from its traces, proposes single changes on its
    self_improvement.editable_surfaces (model tier, temperature, max_tokens, description),
    and verifies each by running it and the current spec on the same recent inputs, never
    those of a run in which a gate was rejected (no gate is approved: a gated stage and what
    follows it are not executed; tool approvals are refused; bandits are not rewarded). Verified
    changes are kept as proposals: nothing is written to the spec until you run
    `armature proposals apply`. `armature schedule SPEC` runs rounds on the block's schedule.
    Review lanes: a verified change to anything but a role's description, temperature,
    max_tokens, a timeout_s, a retry limit or a tier of the same provider and endpoint
    (stages, gates, safety, schemas, tools, depends_on, a tier elsewhere) goes to
    <spec>.pending.yaml, never over SPEC; `--apply-pending` promotes it. With
    self_improvement.auto_apply: true the best verified auto-lane change is written to SPEC
    at the end of the round.
    Exits 0 when the round finished (whatever it found), 1 when it failed, 2 on a spec
    without a self_improvement block.

    `armature improve history SPEC [--json]` prints every round of the spec: its HQS, its
    proposals (verdicts and predicted fixes and regressions), the check of the last applied
    change's predictions, the drift score, and which proposals were applied when.
    """

    if str(spec) == "history" and not spec.exists():
        return _history(target, as_json)
    if target is not None:
        raise fail(f"error: unexpected argument {target!r}; `armature improve SPEC`", 2)
    if apply_pending:
        _apply_pending(spec, yes=yes)
        return

    _improve_round(
        spec,
        who="the loop",
        example="model_tier",
        tag="",
        title="improvement round",
        options={"verify_runs": verify_runs},
        wait=wait,
        address=address,
        queue=queue,
        as_json=as_json,
    )


@app.command(rich_help_panel=LEARN)
def optimize(
    spec: SpecArg,
    proposals: Annotated[
        int,
        typer.Option(
            "--proposals",
            "-k",
            min=1,
            max=10,
            help="LLM-proposed changes to verify in the round.",
        ),
    ] = 1,
    verify_runs: VerifyRunsOpt = None,
    wait: WaitOpt = True,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """One A/B round of LLM-proposed changes only (the 0.7.0 command), verified like `armature
    improve`'s.

    The refiner (self_improvement.refiner_tier; default: the spec's highest tier, and a
    simulate tier works offline) reads the spec's diagnosis, the transcripts of its worst
    runs and the improvement history, and proposes --proposals changes on the editable
    surfaces (each scanned, validated and compiled; never one the history rejected). Each is
    run against the current spec on the same recent inputs and accepted only when the
    paired interval verifies it. The round is kept in the same history as `armature improve`
    (`armature improve history SPEC`); verified changes are proposals (`armature proposals
    apply ID`), or apply / go to <spec>.pending.yaml by the same review lanes and
    self_improvement.auto_apply. Exits 0 when the round finished, 1 when it failed, 2 on a
    spec without a self_improvement block.

    Example: `armature optimize specs/triage.yaml --proposals 2 --json`
    """

    _improve_round(
        spec,
        who="the refiner",
        example="description",
        tag="opt-",
        title="optimize round (LLM-proposed changes)",
        options={"verify_runs": verify_runs, "refiner": "only", "refiner_proposals": proposals},
        wait=wait,
        address=address,
        queue=queue,
        as_json=as_json,
    )


@app.command(rich_help_panel=LEARN)
def finetune(
    spec: SpecArg,
    wait: WaitOpt = True,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Run one round of the fine-tune loop on a spec now (needs the finetune extra on the
    worker).

    For each finetune.target_stages stage (default: every LLM stage) with at least
    min_examples distinct successful replies in the trace store, trains a LoRA adapter of
    finetune.lora_rank on finetune.base_model (a local directory; nothing is downloaded) for
    max_steps steps, measures the reply loss on held-out examples (finetune.eval_share) with
    the base model and with the adapter, and, when the adapter's is lower, runs the spec on
    the held-out examples' inputs with and without it (paired verification runs). Verified:
    loss below the base model's and the paired runs no worse (non-inferiority within
    finetune.noninferiority_margin); fewer than 5 pairs: insufficient_evidence; no judge
    stage reads the stage: unmeasurable (HQS cannot see reply quality there). With
    finetune.method dpo, each stage trains on its preference pairs (min_examples counts
    them; a successful and a failed attempt sent the same messages) with the DPO loss on top
    of its SFT adapter (its newest verified one, or one trained first in the round when it has
    min_examples successful replies; else the base model), and is verified by held-out
    preference accuracy above that reference's 0.5 and paired runs that show the spec better
    with it (paired_not_better otherwise); the SFT adapter alone is paired too. A tier
    `{provider: local, model: <base>, adapter: latest}`
    then uses the newest verified adapter of the calling stage. `armature schedule SPEC` runs
    rounds on finetune.schedule. Exits 0 when the round finished, 1 when it failed, 2 on a
    spec without a finetune block.
    """
    import uuid

    from armature_temporal.finetune.models import FinetuneInput, FinetuneResult

    compiled = load_or_exit(spec)
    if compiled.finetune is None:
        raise fail(
            f"error: {spec}: spec {compiled.name!r} has no finetune block; add one, e.g.\n"
            "  finetune:\n    base_model: models/my-small-model   # a local transformers "
            "model directory",
            2,
        )
    result = run_round(
        "Finetune",
        FinetuneInput(spec_text=spec.read_text(encoding="utf-8"), spec_path=str(spec.resolve())),
        FinetuneResult,
        f"finetune-{compiled.name}-{uuid.uuid4().hex[:8]}",
        f"fine-tune round for spec {compiled.name!r}",
        wait=wait,
        address=address,
        queue=queue,
        as_json=as_json,
    )
    if result is None:
        return
    out.print(f"{result.status}: {result.detail}", markup=False, highlight=False)
    if result.status == "failed":
        raise typer.Exit(1)
    for adapter in result.adapters:
        out.print(
            f"  {adapter.id}  {adapter.verdict}  {adapter.detail}", markup=False, highlight=False
        )
        out.print(f"    {adapter.path}", markup=False, highlight=False)


def _history(target: str | None, as_json: bool) -> None:
    from pathlib import Path

    from armature_temporal.commands._common import open_store, print_json

    if target is None:
        raise fail("error: `armature improve history SPEC`: give a spec file or name", 2)
    path = Path(target)
    name = load_or_exit(path).name if path.is_file() else target
    store, where = open_store()
    try:
        rounds = store.rounds(name)
        applied = store.applied_changes(name)
        proposals = store.proposals(spec=name, limit=1000)
    finally:
        store.close()
    from armature_temporal.improve.render import history_data, render_history

    data = history_data(name, rounds, proposals, applied)
    if as_json:
        print_json(data)
        return
    if not rounds and not applied:
        out.print(
            f"no improvement rounds of {name!r} in the store at {where}; `armature improve "
            "SPEC` runs one",
            markup=False,
        )
        return
    out.print(render_history(data))


def _apply_pending(spec: Path, *, yes: bool) -> None:
    """``armature improve SPEC --apply-pending``: promote the reviewed pending file."""
    from armature_temporal.commands._common import open_store
    from armature_temporal.errors import ArmatureError, SpecError
    from armature_temporal.improve.edit import unified_diff
    from armature_temporal.improve.pending import (
        PendingError,
        applied_record,
        check_fresh,
        read_pending,
        write_atomically,
    )
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text

    try:
        current = spec.read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(f"error: cannot read {spec}: {exc.strerror}", 2) from None
    try:
        pending = read_pending(spec)
        check_fresh(spec, pending, current)
    except PendingError as exc:
        raise fail(f"error: {exc}", 2) from None
    try:  # it may have been edited during review: it must still be a valid spec
        plan = compile_spec(load_spec_text(pending.text, str(spec), base_dir=spec.parent))
    except SpecError as exc:
        raise fail(f"error: {pending.path} is not a valid spec: {exc}; nothing written", 2) from (
            None
        )
    out.print(unified_diff(current, pending.text, str(spec)), markup=False, highlight=False)
    if not yes and not typer.confirm(f"write this over {spec}?", default=False):
        raise fail(f"not applied; {spec} and {pending.path.name} left as they were", 1)
    write_atomically(spec, pending.text)
    pending.path.unlink()
    note = ""
    store, _ = open_store()
    try:
        found = store.proposal(pending.proposal_id)
        if found is not None and found.status == "proposed":
            store.set_proposal_status(pending.proposal_id, "applied")
            store.record_applied(applied_record(found, spec))  # its predictions, next round
        elif found is None:
            note = f" (proposal {pending.proposal_id} is not in this store)"
    except ArmatureError as exc:
        note = f" (its proposal was not marked applied: {exc})"
    finally:
        store.close()
    out.print(
        f"applied {pending.proposal_id} from {pending.path.name} to {spec}{note}; spec_hash "
        f"{plan.spec_hash[:12]}: runs started from this file are a new version",
        markup=False,
    )


def _improve_round(
    spec: Path,
    *,
    who: str,
    example: str,
    tag: str,
    title: str,
    options: dict[str, Any],
    wait: bool,
    address: str | None,
    queue: str | None,
    as_json: bool,
) -> None:
    """One Improve workflow round on ``spec`` (``options`` go into its ImproveInput); exits 2
    on a spec without a self_improvement block."""
    import uuid

    compiled = load_or_exit(spec)
    if compiled.self_improvement is None:
        raise fail(
            f"error: {spec}: spec {compiled.name!r} has no self_improvement block, so {who} "
            "may change nothing; add one, e.g.\n  self_improvement:\n    editable_surfaces: "
            f"[{compiled.stages[0].id}.{example}]",
            2,
        )
    from armature_temporal.improve.models import ImproveInput, ImproveResult

    result = run_round(
        "Improve",
        ImproveInput(
            spec_text=spec.read_text(encoding="utf-8"),
            spec_path=str(spec.resolve()),
            **options,
        ),
        ImproveResult,
        f"improve-{compiled.name}-{tag}{uuid.uuid4().hex[:8]}",
        f"{title} for spec {compiled.name!r}",
        wait=wait,
        address=address,
        queue=queue,
        as_json=as_json,
    )
    if result is None:
        return
    from armature_temporal.improve.render import render_result

    out.print(render_result(result))
