"""The answer cache of LLM stages: ``armature cache stats|clear`` (and ``eval``, mounted by
``cli.py`` from :mod:`~armature_temporal.commands.cache_eval`).

``stats`` shows a spec's entries by status, its hits (exact and semantic), the cost they saved
and a sample of recent hits to audit; ``clear`` drops a spec's entries (of one stage with
``--stage``). Both read and write the trace store only.
"""

from __future__ import annotations

from typing import Annotated

import typer

from armature_temporal.commands._common import (
    INSPECT,
    JsonFlag,
    SpecArg,
    SpecNameArg,
    fail,
    load_or_exit,
    open_store,
    out,
    print_json,
    print_wide,
    shorten,
    spec_name_of,
)
from armature_temporal.errors import ArmatureError, did_you_mean

app = typer.Typer()

cache_app = typer.Typer(
    help="The answer cache of LLM stages: stats (entries, hits, saved cost, hits to audit), "
    "clear, and eval (the semantic rule scored on labelled pairs).",
    no_args_is_help=True,
)
app.add_typer(cache_app, name="cache", rich_help_panel=INSPECT)


@cache_app.command("stats")
def cache_stats(
    spec: SpecNameArg,
    sample: Annotated[int, typer.Option("--sample", help="Recent hits to show.", min=0)] = 10,
    as_json: JsonFlag = False,
) -> None:
    """Show a spec's cache: entries by status and stage (withheld ones with why), hits exact
    and semantic, the cost they saved (each hit saves its source attempt's cost), and the most
    recent hits, each query task beside the task whose answer it reused."""
    name = spec_name_of(spec)
    store, where = open_store()
    from armature_temporal.cache.stats import cache_stats as compute

    try:
        stats = compute(store, name, sample=sample)
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json(stats.model_dump(mode="json"))
        return
    e, h = stats.entries, stats.hits
    lines = [
        f"cache of {name} (store {where})",
        f"entries: {e['servable']} servable, {e['pending']} pending, {e['withheld']} withheld, "
        f"{e['expired']} expired",
        f"hits: {h['all']} ({h['exact']} exact, {h['semantic']} semantic); saved "
        f"${stats.saved_cost_usd:.4f}",
    ]
    for reason, count in stats.withheld_reasons.items():
        lines.append(f"  withheld {count}: {reason}")
    out.print("\n".join(lines), markup=False, highlight=False)
    if stats.stages:
        from rich.table import Table

        table = Table(title="entries per stage", title_justify="left")
        for column in ("stage", "servable", "pending", "withheld", "expired", "hits"):
            table.add_column(column, no_wrap=True)
        for s in stats.stages:
            table.add_row(
                s.stage_id,
                *(str(v) for v in (s.servable, s.pending, s.withheld, s.expired, s.hits)),
            )
        print_wide(table)
    if stats.sample:
        from rich.table import Table

        audit = Table(
            title="recent hits (audit: was the reused answer right?)", title_justify="left"
        )
        for column in ("at", "stage", "kind", "similarity", "source run"):
            audit.add_column(column, no_wrap=True)
        audit.add_column("task asked", overflow="fold")
        audit.add_column("task reused", overflow="fold")
        for hit in stats.sample:
            audit.add_row(
                hit.at[:19],
                hit.stage_id,
                hit.kind,
                f"{hit.similarity:.3f}",
                hit.source_run or "(cleared)",
                shorten(hit.task, 60),
                shorten(hit.source_task or "", 60),
            )
        print_wide(audit)


@cache_app.command("clear")
def cache_clear(
    spec: SpecArg,
    stage: Annotated[
        list[str] | None, typer.Option("--stage", help="Only this LLM stage's (repeatable).")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Drop a spec's cache entries (or one stage's): later runs call the model again. Recorded
    hits stay, for the audit."""
    plan = load_or_exit(spec)
    stages = [s.id for s in plan.stages if s.kind == "llm"]
    for name in stage or []:
        if name not in stages:
            raise fail(
                f"error: --stage {name!r}: {spec} has no LLM stage of that name; its LLM "
                f"stages are {', '.join(stages) or '(none)'}" + did_you_mean(name, stages),
                2,
            )
    store, where = open_store()
    try:
        dropped = store.clear_cache(plan.name, stage_ids=stage or None)
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json({"spec_name": plan.name, "stages": stage or stages, "cleared": dropped})
        return
    which = f" of stage(s) {', '.join(stage)}" if stage else ""
    out.print(
        f"cleared {dropped} cache entr{'y' if dropped == 1 else 'ies'}{which} of {plan.name} "
        f"(store {where})",
        markup=False,
    )
