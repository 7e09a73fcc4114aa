"""``armature knowledge facts list|show|history|merge``: the facts runs learnt, kept in the trace
store with their history (see :mod:`armature_temporal.knowledge.facts`). ``cli.py`` mounts
``facts_app`` on the ``knowledge`` group."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    JsonFlag,
    fail,
    open_store,
    out,
    print_json,
    print_wide,
)
from armature_temporal.errors import ArmatureError

facts_app = typer.Typer(
    help="Facts that outlive a run: what stages stated, reconciled with what was known "
    "(duplicate, update, supersede, contradict: nothing overwritten, the newer current) and "
    "screened by the admission scan. List them, show an entity, a fact's history; merge "
    "another store's or namespace's.",
    no_args_is_help=True,
)

NamespaceOpt = Annotated[
    str | None,
    typer.Option(
        "--namespace", "-n", help="Only this namespace (a spec's memory name; default: all)."
    ),
]
StaleOpt = Annotated[
    float,
    typer.Option(
        "--stale-days", min=0, help="Mark facts last seen longer ago than this (0: never)."
    ),
]


def _now() -> datetime:
    return datetime.now(UTC)


def _no_facts_hint(store: Any, where: str) -> str:
    spaces = list(store.fact_namespaces())
    if not spaces:
        return f"no facts in {where} yet; runs of a spec whose memory extracts facts add them"
    return f"namespaces with facts: {spaces}"


@facts_app.command("list")
def list_facts(
    namespace: NamespaceOpt = None,
    every: Annotated[
        bool,
        typer.Option(
            "--all", help="Every version: superseded, contradicted and rejected ones too."
        ),
    ] = False,
    entity: Annotated[
        str | None, typer.Option("--entity", "-e", help="Only facts about or pointing at it.")
    ] = None,
    stale_days: StaleOpt = 30.0,
    as_json: JsonFlag = False,
) -> None:
    """The current facts (with --all, their whole history), each with its id, entity, text,
    confidence, status and when it was last seen; stale ones marked."""
    from armature_temporal.knowledge.facts import is_stale

    store, where = open_store()
    try:
        found = store.facts(namespace, history=every, entity=entity)
        hint = "" if found else _no_facts_hint(store, where)
    finally:
        store.close()
    now = _now()
    if as_json:
        print_json(
            [{**f.model_dump(mode="json"), "stale": is_stale(f, now, stale_days)} for f in found]
        )
        return
    if not found:
        what = f" about {entity!r}" if entity else ""
        space = f" in namespace {namespace!r}" if namespace else ""
        out.print(f"no {'' if every else 'current '}facts{what}{space}; {hint}", markup=False)
        return
    from rich.table import Table

    table = Table("id", "namespace", "entity", "fact", "conf.", "status", "last seen")
    for f in found:
        seen = f.confirmed_at[:10] + (" (stale)" if is_stale(f, now, stale_days) else "")
        table.add_row(
            f.id, f.namespace, f.subject_name, f.text, f"{f.confidence:.2f}", f.status, seen
        )
    print_wide(table)


@facts_app.command("show")
def show(
    entity: Annotated[str, typer.Argument(help="An entity's name, as `facts list` shows it.")],
    namespace: NamespaceOpt = None,
    detail: Annotated[
        bool, typer.Option("--detail", help="Each fact's provenance too (run, stage, when).")
    ] = False,
    stale_days: StaleOpt = 30.0,
    as_json: JsonFlag = False,
) -> None:
    """One entity: its current facts, its relations to other entities (out and in); with
    --detail, where each came from. What the facts_entity tool answers an agent."""
    from armature_temporal.knowledge.facts import FactError, entity_view

    store, where = open_store()
    try:
        facts = store.facts(namespace)
        hint = "" if facts else _no_facts_hint(store, where)
    finally:
        store.close()
    if not facts:
        raise fail(f"error: no entity {entity!r}: no current facts; {hint}", 1)
    try:
        view = entity_view(facts, entity, now=_now(), staleness_days=stale_days, detail=detail)
    except FactError as exc:
        raise fail(f"error: {exc}; list them with `armature knowledge facts list`", 1) from None
    if as_json:
        print_json(view)
        return
    out.print(view["entity"], markup=False, highlight=False)
    for title, key in (
        ("facts", "facts"),
        ("relations", "relations_out"),
        ("from", "relations_in"),
    ):
        for item in view[key]:
            stale = " (stale)" if item["stale"] else ""
            out.print(
                f"  {title:<9} {item['text']}  [{item['id']}, {item['confidence']:.2f}]{stale}",
                markup=False,
                highlight=False,
            )
            for p in item.get("provenance", []):
                out.print(
                    f"            seen in {p['namespace']} run {p['run_id']}, stage "
                    f"{p['stage']} {p['field']}, {p['recorded_at']}",
                    markup=False,
                    highlight=False,
                )


@facts_app.command("history")
def history(
    fact_id: Annotated[str, typer.Argument(help="A fact's id, as `facts list --all` shows it.")],
    as_json: JsonFlag = False,
) -> None:
    """Every version of a fact's claim (same namespace, entity and predicate), oldest first,
    with its status and links, and what happened to each: new, duplicate, update, supersede,
    contradict, rejected (with the scan's findings)."""
    store, _ = open_store()
    try:
        versions = store.fact_slot(fact_id)
        events = store.fact_events([v.id for v in versions])
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    finally:
        store.close()
    if as_json:
        print_json({"versions": [v.model_dump(mode="json") for v in versions], "events": events})
        return
    for v in versions:
        mark = "*" if v.id == fact_id else " "
        links = "".join(
            f", {name} {value}"
            for name, value in (("replaced", v.previous), ("replaced by", v.superseded_by))
            if value
        )
        out.print(
            f"{mark} {v.id}  {v.status:<12} {v.text}  ({v.recorded_at[:19]}{links})",
            markup=False,
            highlight=False,
        )
        for e in events:
            if e["fact_id"] != v.id:
                continue
            other = f" {e['other']}" if e["other"] else ""
            found = (e["detail"] or {}).get("findings") or []
            why = "; ".join(f"{f['category']} ({f['rule']}): {f['text']!r}" for f in found)
            out.print(
                f"      {e['at'][:19]}  {e['event']}{other}{'  ' + why if why else ''}",
                markup=False,
                highlight=False,
            )


def _other_store_facts(source: str, namespace: str | None) -> list[Any]:
    from armature_temporal.store import TraceStore

    if source.startswith("sqlite:///"):
        path = Path(source.removeprefix("sqlite:///"))
        if not path.is_file():
            raise fail(
                f"error: --from {source!r}: there is no database file {str(path)!r}; give "
                "the URL of an existing trace store (sqlite:///PATH or postgresql+psycopg://...)",
                1,
            )
    try:
        other = TraceStore(source)
    except ArmatureError as exc:
        raise fail(f"error: --from {source!r}: {exc}", 1) from None
    try:
        facts: list[Any] = other.facts(namespace)
        spaces = list(other.fact_namespaces())
    finally:
        other.close()
    if not facts:
        which = f" in namespace {namespace!r}" if namespace else ""
        raise fail(
            f"error: --from {source!r}: no current facts{which}; its namespaces with facts: "
            f"{spaces}",
            1,
        )
    return facts


@facts_app.command("merge")
def merge(
    source: Annotated[
        str,
        typer.Option(
            "--from",
            help="Another trace store's URL (sqlite:///PATH, postgresql+psycopg://...), or a "
            "namespace of this store.",
        ),
    ],
    into: Annotated[str, typer.Option("--into", help="The namespace to merge into.")],
    from_namespace: Annotated[
        str | None,
        typer.Option(
            "--from-namespace", help="With a store URL: only this namespace of it (default: all)."
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Bring another graph's current facts into a namespace, reconciled by the same rules (a
    conflict keeps both, the newer current), each with its provenance, and scanned again.
    Merging the same graph twice adds nothing.

    Example: armature knowledge facts merge --from sqlite:///team.db --into triage
    """
    from armature_temporal.store import TraceStore

    if "://" in source:
        theirs = _other_store_facts(source, from_namespace)
    else:
        if from_namespace is not None:
            raise fail("error: --from-namespace goes with a store URL in --from", 2)
        if source == into:
            raise fail(f"error: --from {source!r} is --into itself; name another namespace", 2)
        theirs = []
    try:
        store = TraceStore()
    except ArmatureError as exc:
        raise fail(f"error: {exc}", 1) from None
    try:
        if "://" not in source:
            theirs = store.facts(source)
            if not theirs:
                raise fail(
                    f"error: --from {source!r}: no current facts in that namespace of this "
                    f"store; namespaces with facts: {list(store.fact_namespaces())} (or give "
                    "another store's URL)",
                    1,
                )
        done = store.merge_facts(theirs, into)
    finally:
        store.close()
    summary = done.summary()
    if as_json:
        print_json(
            {
                "from": source,
                "into": into,
                "summary": summary,
                "outcomes": [
                    {"decision": o.decision, "fact": o.fact.id, "target": o.target}
                    for o in done.outcomes
                ],
            }
        )
        return
    counts = ", ".join(f"{n} {d}" for d, n in summary.items() if n)
    out.print(
        f"merged {len(theirs)} facts from {source} into {into!r}: {counts}",
        markup=False,
        highlight=False,
    )
