"""``armature runs watch RUN``: a run's events as they happen (the same source as the run
API's ``GET /run/{id}/events``). ``cli.py`` mounts it on the ``runs`` group, which lives in
:mod:`~armature_temporal.commands.runs`."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    AddressOpt,
    JsonFlag,
    err,
    out,
    run_coroutine,
    shorten,
    temporal_client,
)

__all__ = ["event_line", "runs_watch"]


def runs_watch(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    after: Annotated[
        int,
        typer.Option(
            "--after",
            min=0,
            metavar="N",
            help="Start after event N (the seq a previous watch printed last); default: "
            "from the first event.",
        ),
    ] = 0,
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Follow a run's events until it ends: stages starting and finishing, gates waiting and
    decided, the run's end. Exit 0 when the run completes, 1 when it fails, is rejected or
    cancelled.

    Each event has a seq; `--after N` resumes after event N without repeating any. --json
    prints one JSON object a line (JSON Lines), as `GET /run/RUN/events` sends them.

    Example: armature runs watch customer-triage-1a2b3c4d --after 3
    """
    from armature_temporal.service.events import follow_events

    async def go() -> str | None:
        client = await temporal_client(address)
        last: str | None = None
        async for event in follow_events(client, run_id, after=after):
            if as_json:
                sys.stdout.write(event.model_dump_json() + "\n")
                sys.stdout.flush()
            else:
                out.print(event_line(event.model_dump(mode="json")), markup=False, highlight=False)
            last = event.type
        if last is None:  # --after N at or past the end: say where the run ended
            async for event in follow_events(client, run_id, after=0):
                last = event.type
                final = event
            if last is not None:
                err.print(
                    f"nothing after event {after}: run {run_id} ended at event {final.seq} "
                    f"({final.type}); `armature runs watch {run_id}` shows them all",
                    markup=False,
                )
        return last

    last = run_coroutine(go())
    raise typer.Exit(0 if last in (None, "run_complete") else 1)


def event_line(event: dict[str, Any]) -> str:
    """One line for a person: seq, time, type, stage and what matters for that type."""
    data = event.get("data") or {}
    kind = event["type"]
    detail = ""
    if kind == "stage_complete":
        detail = str(data.get("status", ""))
        if data.get("error"):
            detail += f": {shorten(data['error'], 60)}"
        elif "output" in data:
            detail += f" {shorten(data['output'], 60)}"
    elif kind == "stage_progress":
        from armature_temporal.commands.run_view import loop_line

        detail = loop_line(data)
    elif kind == "gate_waiting":
        detail = f"{shorten(data.get('message') or '', 60)} — armature approve {event['run_id']} "
        detail += str(event.get("stage"))
    elif kind == "gate_decided":
        detail = f"{data.get('decision')} by {data.get('by') or 'unknown'}"
        if data.get("comment"):
            detail += f": {shorten(data['comment'], 50)}"
    elif kind == "run_complete":
        outputs = data.get("outputs")
        detail = "completed" + (f" {shorten(outputs, 60)}" if outputs is not None else "")
    elif kind == "run_failed":
        detail = f"{data.get('status')}: {shorten(data.get('reason') or '', 60)}"
    at = str(event.get("at", ""))[11:19]
    stage = event.get("stage") or "-"
    return f"{event['seq']:>4}  {at}  {kind:<14} {stage:<18} {detail}".rstrip()
