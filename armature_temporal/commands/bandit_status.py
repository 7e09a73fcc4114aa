"""``armature bandit status SPEC`` (each stage's progressive-unlocking ladder and its arms) and
``armature bandit evolve SPEC`` (one maintenance round now, as the hourly schedule runs it).
Mounted on the ``bandit`` group by ``cli.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from armature_temporal.commands._common import (
    JsonFlag,
    SpecArg,
    fail,
    load_or_exit,
    open_store,
    out,
    print_json,
)

if TYPE_CHECKING:
    from armature_temporal.bandit.ladder import Rung
    from armature_temporal.spec.compiler import Plan, PlanStage
    from armature_temporal.views.report import RunTrace

__all__ = ["bandit_evolve", "bandit_status", "stage_status", "with_ladder"]


def _runtime(name: str) -> Any:
    from activities.bandit import runtime_for
    from armature_temporal.bandit import UnknownBanditError

    try:
        return runtime_for(name)
    except UnknownBanditError:
        return None


def _store_rungs(plan: Plan, stage: PlanStage, runs: list[RunTrace]) -> list[Rung]:
    """The fine-tune and SAO rungs, counted in the trace store as the loops count."""
    from armature_temporal.bandit.ladder import Rung
    from armature_temporal.finetune.export import dpo_rows, sft_rows

    ft = plan.finetune
    if ft is None:
        return [
            Rung(rung=r, status="off", threshold="no finetune block", progress="")
            for r in ("fine-tune", "sao")
        ]
    need = ft.min_examples
    ordered = sorted(runs, key=lambda r: r.started_at)
    finished = {r.run_id: r.finished_at or r.started_at for r in ordered}
    sft, _ = sft_rows(ordered, spec=plan.name, stage=stage.id, with_run_id=True)
    # As finetune_prepare counts them for finetune.method dpo.
    pairs, _ = dpo_rows(ordered, spec=plan.name, stage=stage.id, with_run_id=True)
    out: list[Rung] = []
    for name, rows, what in (
        ("fine-tune", sft, "distinct successful replies"),
        ("sao", pairs, "preference pairs (a success and a failure on one input)"),
    ):
        # A row exists once its last run finished (a pair needs both of its runs).
        ready = sorted(
            max(finished.get(str(row.get(k) or ""), "") for k in ("run_id", "rejected_run_id"))
            for row in rows
        )
        at = ready[need - 1] or None if len(rows) >= need else None
        if name == "sao" and ft.method != "dpo":
            # The pairs are counted all the same, but no round trains on them.
            out.append(
                Rung(
                    rung="sao",
                    status="off",
                    threshold=f"finetune.method is {ft.method!r}: no DPO round runs (set "
                    "finetune.method: dpo to train on the pairs)",
                    progress=f"{len(rows)}/{need}",
                )
            )
            continue
        out.append(
            Rung(
                rung=name,  # type: ignore[arg-type]
                status="unlocked" if len(rows) >= need else "locked",
                threshold=f"finetune.min_examples = {need} {what}",
                progress=f"{len(rows)}/{need}",
                unlocked_at=at,
            )
        )
    return out


def stage_status(plan: Plan, runs: list[RunTrace]) -> list[dict[str, Any]]:
    """Each stage with arms: its ladder and its arms (the JSON of ``bandit status``)."""
    from armature_temporal.bandit.ladder import bandit_rungs

    stages = []
    for stage in plan.stages:
        if not stage.arms:
            continue
        name = f"{plan.name}:{stage.id}"
        runtime = _runtime(name)
        contexts_of = getattr(runtime.backend, "contexts", None) if runtime is not None else None
        contexts = contexts_of(name) if contexts_of is not None else []
        rungs = bandit_rungs(runtime, stage.bandit, contexts)
        rungs += _store_rungs(plan, stage, runs)
        arms = (
            [a.model_dump(mode="json") for a in runtime.arms(include_retired=True)]
            if runtime is not None
            else []
        )
        stages.append(
            {
                "bandit": name,
                "stage": stage.id,
                "ladder": [r.model_dump(mode="json") for r in rungs],
                "arms": arms,
            }
        )
    return stages


def _tables(stages: list[dict[str, Any]]) -> Any:
    """The ladder and arms tables of ``stage_status``'s entries, as one renderable."""
    from rich.console import Group
    from rich.table import Table

    parts: list[Any] = []
    for entry in stages:
        table = Table(title=f"bandit {entry['bandit']} · ladder", show_edge=False, pad_edge=False)
        for col in ("rung", "status", "threshold", "progress", "unlocked at"):
            table.add_column(col)
        for rung in entry["ladder"]:
            label = rung["rung"] + (f" [{rung['context']}]" if rung.get("context") else "")
            table.add_row(
                Text(label),
                rung["status"],
                Text(rung["threshold"]),
                Text(rung["progress"]),
                (rung["unlocked_at"] or "")[:19],
            )
        parts.append(table)
        if not entry["arms"]:
            parts.append(Text("no run has chosen an arm yet"))
            continue
        arms = Table(title=f"bandit {entry['bandit']} · arms", show_edge=False, pad_edge=False)
        for col in ("arm", "origin", "status", "pulls", "mean", "P(best)"):
            arms.add_column(col)
        for arm in entry["arms"]:
            arms.add_row(
                Text(arm["arm_id"]),
                arm["origin"],
                arm["status"],
                str(arm["pulls"]),
                f"{arm['mean']:.3f}",
                f"{arm['p_best']:.2f}",
            )
        parts.append(arms)
    return Group(*parts)


def with_ladder(plan: Plan, runs: list[RunTrace], data: Any, shown: Any) -> tuple[Any, Any]:
    """``armature dashboard SPEC_FILE``'s ``(data, shown)`` with each arm stage's ladder and
    arms added (``data["bandits"]``); unchanged for a spec without arms."""
    from rich.console import Group

    stages = stage_status(plan, runs)
    if not stages:
        return data, shown
    if isinstance(data, dict):
        data = {**data, "bandits": stages}
    return data, Group(shown, _tables(stages))


def bandit_status(spec: SpecArg, as_json: JsonFlag = False) -> None:
    """Each arm stage's learning ladder — Thompson sampling, context, evolution, fine-tune,
    SAO — with its threshold, progress and when it unlocked, then its arms (bred and retired
    ones included)."""
    from armature_temporal.views import load_runs

    plan = load_or_exit(spec)
    store, _ = open_store()
    runs = load_runs(store, spec=plan.name, limit=1000)
    stages = stage_status(plan, runs)
    if as_json:
        print_json({"spec": plan.name, "stages": stages})
        return
    if not stages:
        raise fail(f"error: spec {plan.name!r} has no stage with arms; add arms to a stage", 2)
    out.print(_tables(stages))


def bandit_evolve(spec: SpecArg, as_json: JsonFlag = False) -> None:
    """One maintenance round of the spec's bandits now, in this process, on this store: what
    the hourly schedule runs (evolution where a stage has bandit.evolve, then a snapshot)."""
    import asyncio

    from activities.bandit import bandit_maintenance
    from armature_temporal.service.schedules import maintenance_input

    plan = load_or_exit(spec)
    inp = maintenance_input(plan, str(spec))
    if not inp.names:
        raise fail(f"error: spec {plan.name!r} has no stage with arms; add arms to a stage", 2)
    done = asyncio.run(bandit_maintenance(inp))
    if as_json:
        print_json({"spec": plan.name, "done": done})
        return
    for line in done or ["no bandit of this spec has a decision yet"]:
        out.print(line, markup=False, highlight=False)
