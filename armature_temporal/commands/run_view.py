"""How a run is shown on a terminal: its progress while ``submit --wait`` follows it
(:func:`follow_run`, on stderr) and its state, stages, gates and link (:func:`print_run`, for
``submit --wait`` and ``runs show``)."""

from __future__ import annotations

import json
from typing import Any

from rich.text import Text

from armature_temporal.commands._common import err, out, print_wide, shorten

__all__ = ["POLL_S", "follow_run", "loop_line", "print_run", "progress_detail", "whole"]

#: Seconds between polls of a running run's state (its close wakes the follower at once).
POLL_S = 0.5


def progress_detail(kind: str | None, st: Any) -> str:
    """What a progress line adds to a stage's status: the attempt and tier of a model stage
    tried more than once, a fan-out's child count, a tool loop's turn and window; nothing
    unknown."""
    if kind == "fan_out" or st.children:
        count = len(st.children) or st.attempts
        return f" ({count} children)" if count else ""
    parts = []
    if st.attempts > 1:
        parts.append(f"attempt {st.attempts}" + (f", tier {st.tier}" if st.tier else ""))
    if st.loop:
        parts.append(loop_line(st.loop))
    return f" ({'; '.join(parts)})" if parts else ""


def loop_line(loop: dict[str, Any]) -> str:
    """A tool loop's progress in words: turn N/M, the window's tokens (of its budget), the
    compactions so far, why it stopped, and the child workflow it continues in."""
    text = f"turn {loop.get('turn')}/{loop.get('max_turns')}"
    window, budget = loop.get("window_tokens"), loop.get("budget")
    if isinstance(window, int):
        text += f", window {window:,}" + (f"/{budget:,}" if isinstance(budget, int) else "")
        text += " tokens"
    if loop.get("compactions"):
        text += f", {loop['compactions']} compaction" + ("s" if loop["compactions"] > 1 else "")
    if loop.get("stopped"):
        text += f", stopped: {loop['stopped']}"
    if loop.get("child"):  # a long loop continues in a child workflow (its id)
        text += f", in {loop['child']}"
    return text


async def follow_run(client: Any, run_id: str, kinds: dict[str, str] | None = None) -> Any:
    """Poll the run, reporting stage transitions on stderr, until it closes. ``kinds``: each
    stage's kind (from the plan), so that a fan-out's count is not called an attempt."""
    import asyncio

    from armature_temporal.service.client import show_run

    seen: dict[str, str] = {}
    told: set[str] = set()
    # Between polls, wake as soon as the run closes (its result is a long poll on the server)
    # rather than at the next tick: a short run's last stage no longer waits out a fixed sleep.
    closed = asyncio.ensure_future(_closed(client, run_id))
    try:
        while True:
            view = await show_run(client, run_id)
            _report(view, run_id, kinds, seen, told)
            if view.status != "running":
                return view
            if closed.done():
                await asyncio.sleep(POLL_S)
            else:
                await asyncio.wait({closed}, timeout=POLL_S)
    finally:
        closed.cancel()


async def _closed(client: Any, run_id: str) -> None:
    """Return when the run closes, however it ended (errors are for the poll to show)."""
    try:
        await client.get_workflow_handle(run_id).result()
    except Exception:  # failed, cancelled, unreachable: the poll says which
        return


def _report(
    view: Any, run_id: str, kinds: dict[str, str] | None, seen: dict[str, str], told: set[str]
) -> None:
    """Print what changed since the last poll: a missing worker, stage transitions, gates."""
    if view.status == "running" and view.reason and "no worker" not in told:
        told.add("no worker")
        err.print(f"  waiting: {view.reason}", markup=False, highlight=False)
    for sid, st in view.stages.items():
        line = f"  {sid}: {st.status}{progress_detail((kinds or {}).get(sid), st)}"
        if st.status != "pending" and seen.get(sid) != line:
            seen[sid] = line
            err.print(line, markup=False, highlight=False)
    for gate in view.pending_gates:
        if gate.stage not in told:
            told.add(gate.stage)
            err.print(
                f"  waiting for a person at gate {gate.stage!r}: approve with "
                f"`armature approve {run_id} {gate.stage}` (Ctrl-C stops waiting; "
                "the run keeps waiting durably)",
                markup=False,
                highlight=False,
            )


def print_run(view: Any, *, full: bool = False) -> None:
    """A run's state, a table of its stages, its pending gates and its Web UI link; with
    ``full``, every output and error whole (wrapped), else each cut to a line."""
    from rich.table import Table

    from armature_temporal.settings import ui_url

    state = view.state or view.status
    colour = {
        "completed": "green",
        "failed": "red",
        "rejected": "red",
        "waiting_gate": "yellow",
    }.get(state, "cyan")
    out.print(
        f"run [bold]{view.run_id}[/bold] · spec {view.spec_name} · [{colour}]{state}[/{colour}]"
    )
    if view.reason:
        out.print(f"reason: {view.reason}", markup=False, highlight=False)
    cut = whole if full else shorten
    if view.inputs is not None:
        out.print(f"inputs: {cut(view.inputs)}", markup=False, highlight=False)
    if view.parent_run_id:
        out.print(f"child of {view.parent_run_id}", markup=False, highlight=False)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("stage", "status", "tier", "attempts"):
        table.add_column(col, no_wrap=True)
    table.add_column("output / error", overflow="fold", min_width=20)
    for sid, st in view.stages.items():
        detail = cut(st.error) if st.error and st.status != "completed" else cut(st.output)
        if st.escalated:
            detail = "(escalated) " + detail
        if st.loop:  # a tool loop: its turns, window and compactions
            detail = f"({loop_line(st.loop)}) {detail}"
        attempts = str(st.attempts or "")
        if st.children:  # a fan-out: its count is children, each row below has its attempt
            attempts, detail = "", f"({len(st.children)} children) {detail}"
        table.add_row(sid, st.status, st.tier or "", attempts, Text(detail))
        for child in st.children:
            child_id = str(child.get("id", "?")).removeprefix(f"{view.run_id}/")
            table.add_row(
                Text(f"  └ {child_id}"),
                str(child.get("status", "")),
                "",
                str(child.get("attempt", "")),
                Text(cut(child.get("error", ""))),
            )
    print_wide(table)
    for refused in view.refused_signals:
        said = f"refused {refused.signal} signal ({refused.at[:19]}): {refused.reason}"
        out.print(Text(said, style="red"))
    for gate in view.pending_gates:
        out.print(Text(f"waiting at gate {gate.stage}: {gate.message or ''}", style="yellow"))
        out.print(
            f"  armature approve {view.run_id} {gate.stage}   |   "
            f"armature reject {view.run_id} {gate.stage} --reason ...",
            markup=False,
        )
    out.print(f"Web UI: {ui_url(view.run_id, view.temporal_run_id)}", markup=False)


def whole(value: Any) -> str:
    """``value`` whole: a string as it is, anything else as JSON on one (wrapped) line."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
