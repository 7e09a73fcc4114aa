"""``armature traces verify``: check that the trace store's record was not rewritten (the hash
chains, the MACs, the ledger and its anchors in Temporal). Mounted under ``armature traces`` by
:mod:`.reports`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    JsonFlag,
    err,
    fail,
    open_store,
    out,
    print_json,
    run_coroutine,
)

__all__ = ["traces_app"]

traces_app = typer.Typer(help="Check the trace store.", no_args_is_help=True)


@traces_app.command("verify")
def traces_verify(
    run_id: Annotated[
        str | None,
        typer.Argument(help="Check only this run.", metavar="RUN", show_default=False),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="Temporal server host:port that holds the anchors (default: $TEMPORAL_ADDRESS, "
            "else the local dev server if it is running; never started).",
        ),
    ] = None,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline", help="Do not ask Temporal: every keyed run is unanchored (exit 3)."
        ),
    ] = False,
    allow_unanchored: Annotated[
        bool,
        typer.Option(
            "--allow-unanchored",
            help="Exit 0 when nothing failed though some runs (or the ledger) could not be "
            "compared with Temporal's copy; they are still listed as unanchored.",
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Check that the record was not rewritten: every run's (or RUN's) hash chain, the MAC on
    each record and on its summary (the trace key under ARMATURE_HOME), the store-wide ledger
    (a run deleted whole is still in it), and Temporal's copy: the chain head and store id each
    run's workflow wrote to its memo, and the ledger's heads its anchor workflow received (a run
    Temporal no longer keeps is proven by the ledger's anchored record of its end).

    Prints each failed check by name (chain, mac, summary_mac, ledger, temporal_anchor,
    ledger_anchor) with the record or entry where it fails. A run whose Temporal copy could not
    be read (--offline, Temporal unreachable, its workflow gone and its end not yet in the
    anchored ledger) is "unanchored", never "intact": with the trace key and the database, a
    history can be rewritten so that every check inside the database holds. Runs recorded
    before MACs are "legacy, unkeyed": their chain is checked, nothing else can be.

    Exits 0 when every run is intact (or legacy) and the ledger is anchored, 1 when any check
    failed (the record was tampered with), 3 when nothing failed but something could not be
    proven (unanchored; --allow-unanchored exits 0 then), 2 when RUN is not in the store.
    """
    from armature_temporal.store import database_url
    from armature_temporal.store.ledger import database_identity

    store, where = open_store()
    if run_id is not None and store.run(run_id) is None and not store.records(run_id):
        in_ledger = run_id in {f.run_id for f in store.audit().runs}
        if not in_ledger:
            raise fail(f"error: no run {run_id!r} in the trace store at {where}", 2)
    if offline:
        anchors, ledger, skipped = None, None, "--offline: Temporal was not asked"
    else:
        anchors, ledger, skipped = run_coroutine(
            _read_temporal(address, run_id, database_identity(database_url()))
        )
    found = store.audit(
        [run_id] if run_id is not None else None,
        anchors=anchors,
        anchors_skipped=skipped,
        ledger_anchor=ledger,
    )
    code = 1 if not found.ok else 0 if found.proven or allow_unanchored else 3
    if as_json:
        _verify_json(found, code)
    else:
        _verify_text(found, code, allow_unanchored)
    if code:
        raise typer.Exit(code)


def _of(found: Any, *verdicts: str) -> list[str]:
    return [r.run_id for r in found.runs if r.verdict in verdicts]


def _verify_json(found: Any, code: int) -> None:
    print_json(
        {
            "checked": found.checked,
            "ok": code == 0,
            "proven": found.proven,
            "tampered": not found.ok,
            "intact": len(_of(found, "intact")),
            "unanchored": _of(found, "unanchored", "unchecked"),
            "legacy": _of(found, "legacy"),
            "broken": _of(found, "broken"),
            "breaks": [f.model_dump(mode="json") for f in found.findings],
            "runs": [r.model_dump(mode="json") for r in found.runs],
            "key_id": found.key_id,
            "temporal_anchor_skipped": found.temporal_skipped,
            "ledger_anchor": found.ledger_anchor.model_dump(mode="json"),
            "exit": code,
        }
    )


def _verify_text(found: Any, code: int, allow_unanchored: bool) -> None:
    def say(line: str) -> None:
        out.print(line, markup=False, highlight=False)

    for f in found.findings:
        say(f"{f.run_id or 'ledger'}: {f.check}: {f.problem}: {f.detail}")
    for run_id in _of(found, "legacy"):
        say(
            f"{run_id}: legacy, unkeyed: recorded before MACs; its chain holds, but nothing "
            "else can be checked"
        )
    reasons: dict[str, list[str]] = {}
    for r in found.runs:
        if r.verdict in ("unanchored", "unchecked"):
            why = next(iter(r.skipped.values()), "not proven")
            reasons.setdefault(why, []).append(r.run_id)
    for why, ids in reasons.items():
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        say(f"{len(ids)} run(s) unanchored ({shown}): {why}")
    ledger = found.ledger_anchor
    if ledger.status != "failed":  # a failure is among the findings above
        say(f"ledger: {ledger.status}: {ledger.detail}")
    counts = [f"{len(_of(found, 'intact'))} intact"]
    for label, verdicts in (
        ("unanchored", ("unanchored", "unchecked")),
        ("legacy (unkeyed)", ("legacy",)),
        ("broken", ("broken",)),
    ):
        if n := len(_of(found, *verdicts)):
            counts.append(f"{n} {label}")
    summary = f"{found.checked} run(s) checked: {', '.join(counts)}"
    if code == 1:
        problems = f"; the ledger itself: {len(found.store)} problem(s)" if found.store else ""
        err.print(f"{summary}{problems}: the record was tampered with", markup=False)
    elif found.proven:
        checks = "chain, mac, summary_mac, ledger, temporal_anchor, ledger_anchor"
        held = "" if _of(found, "legacy") else ": every check holds"
        out.print(f"{summary} ({checks}){held}", markup=False)
    else:
        verdict = (
            "nothing failed, but not everything could be compared with Temporal's copy (unanchored)"
        )
        if allow_unanchored:
            out.print(f"{summary}: {verdict}; accepted (--allow-unanchored)", markup=False)
        else:
            err.print(f"{summary}: {verdict}; exit 3 (--allow-unanchored accepts it)", markup=False)


async def _read_temporal(
    address: str | None, run_id: str | None, database: str
) -> tuple[dict[str, Any] | None, Any, str | None]:
    """The chain anchors in the RunSpec workflows' memos (all, or ``run_id``'s) and the
    ledger's anchor for ``database``, or None, None and why they could not be read."""
    from temporalio.service import RPCError

    from armature_temporal.service.anchors import read_ledger_anchor, read_run_anchors
    from armature_temporal.service.client import ConnectionFailed, connect
    from armature_temporal.settings import armature_home, configured_address, dev_port

    addr = configured_address(address)
    if addr is None:
        if not (armature_home() / "run" / "temporal.pid").exists():
            return (
                None,
                None,
                (
                    "no Temporal server configured (--address or TEMPORAL_ADDRESS) and the local "
                    "stack is not running (`armature dev`)"
                ),
            )
        addr = f"127.0.0.1:{dev_port()}"
    try:
        client = await connect(addr)
    except ConnectionFailed as exc:
        return None, None, str(exc)
    try:
        anchors = await read_run_anchors(client, run_id)
        ledger = await read_ledger_anchor(client, database)
    except RPCError as exc:
        return (
            None,
            None,
            f"the Temporal server at {addr} did not answer ({exc.status.name}: {exc.message})",
        )
    return dict(anchors), ledger, None
