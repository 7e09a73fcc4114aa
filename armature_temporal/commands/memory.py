"""The experience memory, by hand: ``armature memory list|show|add|promote|reject|retire``.

Lessons (heuristics) are learnt from earlier runs by ``armature learn``, or added here by a
person; either way they are scanned, then quarantined until memory CI replay-tests them, and
only promoted ones enter prompts. These commands read and update the trace store only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    LEARN,
    JsonFlag,
    SpecArg,
    SpecNameArg,
    err,
    fail,
    load_or_exit,
    open_store,
    out,
    print_json,
    print_wide,
    shorten,
)
from armature_temporal.errors import ArmatureError, did_you_mean

app = typer.Typer()

memory_app = typer.Typer(
    help="The experience memory: lessons from earlier runs, quarantined until memory CI "
    "promotes them. List, show, add, promote, reject or retire them.",
    no_args_is_help=True,
)
app.add_typer(memory_app, name="memory", rich_help_panel=LEARN)

_STATUSES = ("candidate", "quarantined", "promoted", "rejected", "retired")
_KINDS = ("strategic", "procedural", "tool_tip")
IdArg = Annotated[str, typer.Argument(help="The heuristic id (h-...).", metavar="ID")]
ReasonOpt = Annotated[
    str | None, typer.Option("--reason", help="Why (kept in the heuristic's history).")
]


def _stage_or_exit(plan: Any, stage: str | None, spec: Path) -> str | None:
    """``stage`` checked against the spec's LLM stages (``*``: every one, stored as None)."""
    if stage is None or stage == "*":
        return None
    stages = [s.id for s in plan.stages if s.kind == "llm"]
    if stage not in stages:
        raise fail(
            f"error: --stage {stage!r}: {spec} has no LLM stage of that name; its LLM stages "
            f"are {', '.join(stages) or '(none)'} (or * for every one)"
            + did_you_mean(stage, stages),
            2,
        )
    return str(stage)


def _as_json(h: Any) -> dict[str, Any]:
    data: dict[str, Any] = h.model_dump(mode="json", exclude={"embedding"})
    data["embedding_dims"] = len(h.embedding or [])
    data["utility"] = round(h.utility, 4)
    data["trust"] = h.trust
    return data


def _writable_store() -> Any:
    """The trace store, created if there is none yet (adding writes), or exit 1."""
    from armature_temporal.store import TraceStore

    try:
        return TraceStore()
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None


def _user() -> str:
    import getpass
    import os

    return os.environ.get("USER") or getpass.getuser()


@memory_app.command("list")
def memory_list(
    spec: SpecNameArg,
    status: Annotated[str | None, typer.Option("--status", help="Only those in it.")] = None,
    stage: Annotated[
        str | None, typer.Option("--stage", help="Only this stage's (and the spec-wide ones).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """List a spec's heuristics, oldest first, with status, utility and uses."""
    if status is not None and status not in _STATUSES:
        raise fail(f"error: --status {status!r}: use one of {', '.join(_STATUSES)}", 2)
    given = Path(spec)
    plan = load_or_exit(given) if given.suffix in (".yaml", ".yml") else None
    name = plan.name if plan is not None else spec
    # A file's stages are known: --stage is checked against them; by name it is taken as is.
    stage_id = _stage_or_exit(plan, stage, given) if plan is not None else stage
    if stage_id == "*":
        stage_id = None
    store, where = open_store()
    try:
        found = store.heuristics(name, stage_id=stage_id, status=status)
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json([_as_json(h) for h in found])
        return
    if not found:
        out.print(
            f"no heuristics for spec {name!r} in the store at {where}; `armature learn "
            f"{spec}` distils some from its runs, `armature memory add {spec} --stage S "
            '--text "..."` adds one',
            markup=False,
        )
        return
    from rich.table import Table

    table = Table(title=f"heuristics of {name}", title_justify="left")
    for column in ("id", "status", "stage", "kind", "utility", "uses"):
        table.add_column(column, no_wrap=True)
    table.add_column("text", overflow="fold")
    for h in found:
        table.add_row(
            h.id,
            h.status,
            h.stage_id or "*",
            h.kind,
            f"{h.utility:.2f}",
            str(h.uses),
            shorten(h.text, 80),
        )
    print_wide(table)


@memory_app.command("show")
def memory_show(heuristic_id: IdArg, as_json: JsonFlag = False) -> None:
    """Show a heuristic: its text, provenance, utility and every status change."""
    store, _ = open_store()
    try:
        found = store.heuristic(heuristic_id)
        events = store.heuristic_events(heuristic_id) if found is not None else []
    finally:
        store.close()
    if found is None:
        raise fail(
            f"error: no heuristic {heuristic_id!r}; list them with `armature memory list SPEC`",
            2,
        )
    if as_json:
        print_json({**_as_json(found), "events": [e.model_dump(mode="json") for e in events]})
        return
    lines = [
        f"{found.id}  {found.status}  ({found.kind}, {found.source})",
        f"spec {found.spec_name}, stage {found.stage_id or '* (every LLM stage)'}",
        f"text: {found.text}",
        f"utility {found.utility:.2f} (Beta {found.alpha:g}/{found.beta:g}), {found.uses} uses"
        + (f", last {found.last_used_at}" if found.last_used_at else ""),
        f"from runs: {', '.join(found.provenance) or '(none: added by hand)'}",
        "history:",
    ]
    for e in events:
        shown = {k: v for k, v in e.figures.items() if k != "findings"}
        figures = f" {json.dumps(shown, default=str)}" if shown else ""
        lines.append(
            f"  {e.at}  {e.from_status or '-'} -> {e.to_status}  by {e.by}: {e.reason}{figures}"
        )
    out.print("\n".join(lines), markup=False, highlight=False)


@memory_app.command("add")
def memory_add(
    spec: SpecArg,
    stage: Annotated[
        str, typer.Option("--stage", help="The LLM stage it is for (* for every one).")
    ],
    text: Annotated[str, typer.Option("--text", help="The lesson, as a prompt would say it.")],
    kind: Annotated[
        str, typer.Option("--kind", help="strategic, procedural or tool_tip.")
    ] = "strategic",
    as_json: JsonFlag = False,
) -> None:
    """Add a lesson by hand. It is scanned (an injection or a secret is rejected), merged into
    a near-duplicate, or quarantined until the next `armature learn` replay-tests it."""
    if kind not in _KINDS:
        raise fail(f"error: --kind {kind!r}: use one of {', '.join(_KINDS)}", 2)
    if not text.strip():
        raise fail("error: --text is empty; say what to do or avoid", 2)
    plan = load_or_exit(spec)
    stage_id = _stage_or_exit(plan, stage, spec)
    judges = [s.id for s in plan.stages if s.role is not None and s.role.type == "judge"]
    if stage_id in judges:
        raise fail(
            f"error: --stage {stage_id!r}: a judge stage's prompt carries no lessons (memory CI "
            "measures lessons with the judges, so a lesson for one would grade itself); add it "
            f"to a stage the judge scores, or edit {stage_id}'s role in {spec}",
            2,
        )
    from datetime import UTC, datetime

    from armature_temporal.experience import admit, get_embedder

    experience = getattr(plan, "experience", None)
    store = _writable_store()
    try:
        embedder = get_embedder(getattr(experience, "embedding_model", None))
        admission = admit(
            store,
            spec_name=plan.name,
            stage_id=stage_id,
            text=text,
            kind=kind,  # type: ignore[arg-type]  # checked against _KINDS above
            source="person",
            provenance=[],
            by=f"person:{_user()}",
            embedder=embedder,
            now=datetime.now(UTC).isoformat(),
        )
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    h = admission.heuristic
    if as_json:
        print_json(
            {
                "outcome": admission.outcome,
                "merged_into": admission.merged_into,
                "findings": [f.model_dump(mode="json") for f in admission.findings],
                "heuristic": _as_json(h),
            }
        )
    if admission.outcome == "rejected":
        found = ", ".join(sorted({f.category for f in admission.findings})) or "it before"
        err.print(
            f"rejected {h.id}: the immune scan found {found}; it never enters a prompt "
            f"(`armature memory show {h.id}` says what matched)",
            markup=False,
        )
        raise typer.Exit(1)
    if as_json:
        return
    if admission.outcome == "merged":
        out.print(
            f"merged into {h.id} ({h.status}): it already says this — {shorten(h.text, 60)}",
            markup=False,
        )
        return
    out.print(
        f"quarantined {h.id}: the next `armature learn {spec}` replay-tests it and promotes it "
        f"only if runs score better with it; `armature memory promote {h.id}` promotes it now",
        markup=False,
    )


def _move(heuristic_id: str, to: str, reason: str | None, as_json: bool) -> None:
    from armature_temporal.experience import HeuristicError

    by = f"person:{_user()}"
    store = _writable_store()
    try:
        moved = store.set_heuristic_status(
            heuristic_id, to, by=by, reason=reason or f"{to} by hand"
        )
    except HeuristicError as exc:
        raise fail(f"error: {exc}", 2) from None
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json(_as_json(moved))
        return
    note = {
        "promoted": "it enters the prompts of its stage from the next run on",
        "rejected": "it never enters a prompt",
        "retired": "it no longer enters prompts",
    }[to]
    out.print(f"{to} {moved.id} (by {by}): {note}", markup=False)


@memory_app.command("promote")
def memory_promote(
    heuristic_id: IdArg, reason: ReasonOpt = None, as_json: JsonFlag = False
) -> None:
    """Promote a heuristic by hand (candidate, quarantined or retired): it enters prompts."""
    _move(heuristic_id, "promoted", reason, as_json)


@memory_app.command("reject")
def memory_reject(heuristic_id: IdArg, reason: ReasonOpt = None, as_json: JsonFlag = False) -> None:
    """Reject a heuristic (for good): it never enters a prompt."""
    _move(heuristic_id, "rejected", reason, as_json)


@memory_app.command("retire")
def memory_retire(heuristic_id: IdArg, reason: ReasonOpt = None, as_json: JsonFlag = False) -> None:
    """Retire a heuristic: it stops entering prompts (a person may promote it again)."""
    _move(heuristic_id, "retired", reason, as_json)
