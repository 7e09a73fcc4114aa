"""Start and follow runs: ``armature submit``, ``run`` (submit and wait), ``schedule``,
``cancel`` and ``runs list|show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from armature_temporal.commands._common import (
    RUN,
    AddressOpt,
    JsonFlag,
    QueueOpt,
    SpecArg,
    err,
    fail,
    load_or_exit,
    loaded_or_exit,
    open_store,
    out,
    print_json,
    print_wide,
    run_coroutine,
    temporal_client,
)
from armature_temporal.commands.run_view import follow_run, print_run

if TYPE_CHECKING:
    from armature_temporal.spec.compiler import Plan
    from armature_temporal.spec.models import Spec

app = typer.Typer()


InputsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--input",
        "-i",
        help="A run input as name=value, read as the type the spec declares for it (else as "
        "JSON, else as text); repeatable.",
    ),
]
InputsFileOpt = Annotated[
    Path | None, typer.Option("--inputs", help="A JSON file with the run inputs.")
]
SimulateFlag = Annotated[
    bool,
    typer.Option(
        "--simulate",
        help="Run every model tier on the offline simulate provider: no API keys, no cost; "
        "traces go under a spec_hash of their own.",
    ),
]

ReplicateOpt = Annotated[
    int,
    typer.Option(
        "--replicate",
        min=0,
        metavar="N",
        help="Replicate number (default 0): simulate tiers seed their noise from the run "
        "inputs and this, so runs with equal inputs and replicate share it.",
    ),
]


@app.command(rich_help_panel=RUN)
def submit(
    spec: SpecArg,
    input_pairs: InputsOpt = None,
    inputs_file: InputsFileOpt = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait for the run to finish, showing progress, then print every stage's output.",
        ),
    ] = False,
    simulate: SimulateFlag = False,
    replicate: ReplicateOpt = 0,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Compile a spec and run it as a Temporal workflow.

    Prints the run id and its Web UI link. With no --address and no $TEMPORAL_ADDRESS, the
    local stack (Temporal dev server + worker, under $ARMATURE_HOME) is started if needed.
    With --simulate, every model tier answers from the simulate provider instead (tier names
    and escalation stay; tools still run), to try a real spec before spending money.
    Exits 0 when the run was started (or, with --wait, completed), 1 when it failed or was
    rejected, 2 on an invalid spec or inputs.

    Example: armature submit specs/customer-triage.yaml --simulate --input ticket="Refund?"
    """
    compiled = _plan_for(spec, simulate)
    values = _parse_inputs(input_pairs or [], inputs_file, compiled)
    run_coroutine(_submit(compiled, values, wait, address, queue, as_json, replicate=replicate))


@app.command("run", rich_help_panel=RUN)
def run_command(
    spec: SpecArg,
    input_pairs: InputsOpt = None,
    inputs_file: InputsFileOpt = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Also write the run's outputs (stage id → output) as JSON to FILE; '-' for "
            "stdout, instead of the table.",
            metavar="FILE",
        ),
    ] = None,
    simulate: SimulateFlag = False,
    replicate: ReplicateOpt = 0,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Run a spec to the end and print its outputs (`armature submit --wait`, plus --output).

    Shows progress on stderr, then every stage's output. --output writes the outputs of the
    stages that completed as one JSON object, whatever the outcome (the exit code says it).
    Exits 0 when the run completed, 1 when it failed or was rejected, 2 on an invalid spec,
    inputs or options.

    Example: armature run specs/quickstart.yaml --input topic="tide pools" --output out.json
    """
    if output == "-" and as_json:
        raise fail(
            "error: --output - and --json both write to stdout; use --json for the whole run "
            "or --output - for its outputs alone",
            2,
        )
    target = None if output in (None, "-") else Path(output)
    if target is not None and not target.parent.is_dir():
        raise fail(
            f"error: --output {output}: folder {str(target.parent)!r} does not exist; "
            "create it or write elsewhere",
            2,
        )
    compiled = _plan_for(spec, simulate)
    values = _parse_inputs(input_pairs or [], inputs_file, compiled)
    run_coroutine(
        _submit(compiled, values, True, address, queue, as_json, output, replicate=replicate)
    )


def _plan_for(spec: Path, simulate: bool) -> Plan:
    """The compiled plan of ``spec``; with ``simulate``, its offline copy, saying so on
    stderr in one line."""
    loaded, compiled = loaded_or_exit(spec)
    if compiled.knowledge_collection is not None:
        _index_knowledge(spec, loaded.spec, compiled.knowledge_collection)
    if not simulate:
        return compiled
    from armature_temporal.spec.offline import real_tiers, simulated

    replaced = real_tiers(compiled)
    offline = simulated(compiled)
    if not replaced:
        said = "every tier is on simulate already; the run is an ordinary one"
    else:
        names = ", ".join(
            f"{t.name} ({t.provider}{'/' + t.model if t.model else ''}"
            + ("" if owner == compiled.name else f", in {owner}")
            + ")"
            for owner, t in replaced
        )
        said = (
            f"tiers {names} answer from the simulate provider: no API keys, no cost, simulated "
            f"outputs; traces go under spec_hash {offline.spec_hash[:12]}, apart from the real "
            f"version's {compiled.spec_hash[:12]}"
        )
    err.print(f"--simulate: {said}", markup=False, highlight=False)
    return offline


def _index_knowledge(spec: Path, loaded: Spec, collection: str) -> None:
    """Index what changed in the spec's ``knowledge.sources`` before the run starts, saying
    on stderr what was indexed and what could not be read; exit 1 when the collection cannot
    take them (another embedder made it)."""
    from armature_temporal.errors import ArmatureError
    from armature_temporal.knowledge.spec_sources import index_spec_knowledge, spec_embedder
    from armature_temporal.store import TraceStore

    config = loaded.knowledge
    if config is None or not config.sources:
        return
    try:
        report = index_spec_knowledge(
            TraceStore(),
            spec,
            collection,
            list(config.sources),
            embedder=spec_embedder(config.embedder),
            allow_hosts=loaded.http_allow_hosts,
            progress=lambda source, chunks: err.print(
                f"knowledge {collection!r}: indexed {source} ({chunks} chunks)",
                markup=False,
                highlight=False,
            ),
        )
    except ArmatureError as exc:
        raise fail(f"error: knowledge {collection!r}: {exc}", 1) from None
    for source, reason in report.unreadable.items():
        err.print(
            f"knowledge {collection!r}: not indexed: {source}: {reason}",
            markup=False,
            highlight=False,
        )
    if report.indexed or report.unreadable:
        err.print(
            f"knowledge {collection!r}: {len(report.indexed)} indexed, "
            f"{len(report.unchanged)} unchanged, {len(report.unreadable)} not readable",
            markup=False,
            highlight=False,
        )


def _parse_inputs(pairs: list[str], inputs_file: Path | None, plan: Plan) -> dict[str, Any]:
    """The run inputs from ``--inputs FILE`` and then each ``--input name=value`` (read as
    the type ``plan``'s inputs schema declares, else JSON, else text), or exit 2."""
    from armature_temporal.service.client import coerce_input

    values: dict[str, Any] = {}
    if inputs_file is not None:
        try:
            loaded = json.loads(inputs_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise fail(f"error: --inputs {inputs_file}: {exc}", 2) from None
        if not isinstance(loaded, dict):
            raise fail(f"error: --inputs {inputs_file} must hold a JSON object", 2)
        values.update(loaded)
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise fail(f"error: --input {pair!r} must look like name=value", 2)
        values[name] = coerce_input(plan.inputs_schema, name, raw)
    return values


async def _submit(
    plan: Plan,
    values: dict[str, Any],
    wait: bool,
    address: str | None,
    queue: str | None,
    as_json: bool,
    output: str | None = None,
    *,
    replicate: int = 0,
) -> None:
    """Start the run (``replicate``: see RunInput.replicate); with ``wait``, follow it, print
    it and write ``output`` (a file, or ``-`` for stdout in place of the table); exit 1 unless
    it completed."""
    from armature_temporal.service.client import ensure_search_attributes, prepare_inputs, start_run
    from armature_temporal.settings import task_queue, ui_url

    inputs = prepare_inputs(plan, values)
    client = await temporal_client(address, start_local=True)
    await ensure_search_attributes(client)
    handle = await start_run(
        client, plan, inputs, task_queue=queue or task_queue(), replicate=replicate
    )
    link = ui_url(handle.id, handle.result_run_id)
    if not wait:
        if as_json:
            print_json(
                {"run_id": handle.id, "temporal_run_id": handle.result_run_id, "ui_url": link}
            )
        else:
            out.print(f"started run {handle.id}", markup=False)
            out.print(f"Web UI: {link}", markup=False)
            out.print(f"follow it: armature runs show {handle.id}", markup=False)
        return
    err.print(f"started run {handle.id} — {link}", markup=False, highlight=False)
    view = await follow_run(client, handle.id, {st.id: st.kind for st in plan.stages})
    if output is not None:
        _write_outputs(view.outputs, output)
    if as_json:
        print_json({**view.model_dump(mode="json"), "ui_url": link})
    elif output != "-":
        print_run(view, full=True)
    if (view.state or view.status) != "completed":
        raise typer.Exit(1)


def _write_outputs(outputs: dict[str, Any], output: str) -> None:
    """``outputs`` as indented JSON to the file ``output`` (``-``: stdout), or exit 1."""
    if output == "-":
        print_json(outputs)
        return
    text = json.dumps(outputs, indent=2, ensure_ascii=False, default=str) + "\n"
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise fail(f"error: --output {output}: cannot write it: {exc}", 1) from None
    err.print(f"outputs written to {output}", markup=False, highlight=False)


@app.command(rich_help_panel=RUN)
def schedule(
    spec: SpecArg,
    delete: Annotated[bool, typer.Option("--delete", help="Delete the spec's schedules.")] = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Turn the spec's cron triggers into Temporal Schedules (created or updated in place,
    overlap policy SKIP); schedules of removed triggers are deleted. A spec with arms also gets
    an hourly bandit-maintenance schedule (evolution, retirement, learning-curve snapshots), and
    one with self_improvement an improvement-loop schedule (`armature improve` on its cron),
    one with experience.schedule a learning-loop schedule (`armature learn` on its cron), both
    with the spec text as it is now: apply again after editing the spec."""
    compiled = load_or_exit(spec)

    async def go() -> Any:
        from armature_temporal.service.client import ensure_search_attributes
        from armature_temporal.service.schedules import apply_triggers
        from armature_temporal.settings import task_queue

        client = await temporal_client(address, start_local=True)
        await ensure_search_attributes(client)
        return await apply_triggers(
            client,
            compiled,
            queue or task_queue(),
            delete=delete,
            spec_text=spec.read_text(encoding="utf-8"),
            spec_path=str(spec.resolve()),
        )

    changes = run_coroutine(go())
    if as_json:
        print_json([c.model_dump() for c in changes])
        return
    if not changes:
        out.print(f"{compiled.name}: no cron triggers, no schedules", markup=False)
    for change in changes:
        cron = f" ({change.cron})" if change.cron else ""
        out.print(f"{change.action} schedule {change.schedule_id}{cron}", markup=False)


@app.command(rich_help_panel=RUN)
def cancel(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    address: AddressOpt = None,
) -> None:
    """Cancel a running run (running stages are cancelled too); says when it has ended, or
    that it had already ended."""
    from armature_temporal.service.client import cancel_run

    async def go() -> Any:
        return await cancel_run(await temporal_client(address), run_id)

    out.print(run_coroutine(go()).message, markup=False)


runs_app = typer.Typer(help="List and inspect runs (alone: `armature runs list`).")
app.add_typer(runs_app, name="runs", rich_help_panel=RUN)


@runs_app.callback(invoke_without_command=True)
def runs_default(ctx: typer.Context) -> None:
    """List and inspect runs; `armature runs` alone lists them, as `armature runs list`."""
    if ctx.invoked_subcommand is None:
        runs_list()


@runs_app.command("list")
def runs_list(
    spec: Annotated[str | None, typer.Option("--spec", help="Only runs of this spec name.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many, newest first.", min=1)] = 20,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also list the runs that runs start: fan-out children and improvement "
            "rounds' verification runs.",
        ),
    ] = False,
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first: the runs people and schedules started; --all adds the runs
    that runs start (fan-out children, verification runs), whose id is their parent's
    followed by /.

    When the Temporal server cannot be reached, lists the runs the trace store recorded instead,
    and says so on stderr.
    """
    from armature_temporal.service.client import ConnectionFailed

    async def go() -> tuple[Any, ConnectionFailed | None]:
        try:
            client = await temporal_client(address)
        except ConnectionFailed as exc:
            return [], exc
        return await _listed_runs(client, spec, limit, everything), None

    runs, down = run_coroutine(go())
    if down is not None:
        runs, where = _stored_runs(spec, limit, everything)
        if not runs:
            raise fail(f"error: {down}; the trace store at {where} has no runs to show instead")
        err.print(
            f"{down}\nshowing runs from the trace store at {where} instead: statuses as last "
            "recorded; whether a run waits at a gate is not known there",
            markup=False,
            highlight=False,
        )
    else:
        runs = _with_spec_names(runs)
    if as_json:
        print_json([r.model_dump() for r in runs])
        return
    if not runs:
        out.print(
            "no runs yet — start one with: armature submit specs/quickstart.yaml", markup=False
        )
        return
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    for col in ("run", "spec", "status", "started"):
        table.add_column(col, no_wrap=True)
    for r in runs:
        status = r.status + (
            " (waiting at a gate)" if r.waiting_gate and r.status == "running" else ""
        )
        table.add_row(Text(r.run_id), Text(r.spec_name or ""), status, (r.started or "")[:19])
    print_wide(table)


async def _listed_runs(client: Any, spec: str | None, limit: int, everything: bool) -> list[Any]:
    """The newest ``limit`` runs from Temporal visibility (of ``spec``, if given); without
    ``everything``, only runs no other run started (a run a run starts, a fan-out child or a
    verification run, has its parent's id and a ``/`` in its own), filtered before the limit
    applies: the search widens until ``limit`` such runs are found or there are no more."""
    from armature_temporal.service.client import list_runs

    wanted = limit
    while True:
        found = list(await list_runs(client, spec=spec, limit=wanted))
        shown = found if everything else [r for r in found if "/" not in r.run_id]
        if len(shown) >= limit or len(found) < wanted:
            return shown[:limit]
        wanted *= 4


def _with_spec_names(runs: list[Any]) -> list[Any]:
    """``runs`` completed from the trace store: the spec name where Temporal has none (runs
    that runs start carry no search attributes), and ``rejected`` for a run Temporal only knows
    as failed (a rejected run ends as a failed workflow; the store keeps the outcome)."""
    if all(r.spec_name and r.status != "failed" for r in runs):
        return runs
    store, _ = open_store()
    try:
        filled = []
        for r in runs:
            row = store.run(r.run_id) if not r.spec_name or r.status == "failed" else None
            update: dict[str, Any] = {}
            if row is not None and not r.spec_name:
                update["spec_name"] = row.spec_name
            if row is not None and r.status == "failed" and row.status == "rejected":
                update["status"] = "rejected"
            filled.append(r.model_copy(update=update) if update else r)
        return filled
    finally:
        store.close()


def _stored_runs(spec: str | None, limit: int, everything: bool = False) -> tuple[list[Any], str]:
    """Runs as the trace store recorded them (for when Temporal is unreachable), and where
    that store is."""
    from armature_temporal.service.client import RunSummary

    store, where = open_store()
    try:
        rows = store.runs(spec=spec, limit=limit, children=everything)
    finally:
        store.close()
    summaries = [
        RunSummary(
            run_id=r.run_id,
            spec_name=r.spec_name,
            status=r.status,
            started=r.started_at,
            closed=r.finished_at,
        )
        for r in rows
    ]
    return summaries, where


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    full: Annotated[
        bool, typer.Option("--full", help="Show every output and error whole, not cut.")
    ] = False,
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a run: stages, status, attempts, outputs and pending gates.

    Outputs and errors are cut to a line; --full shows them whole, --json everything."""
    from armature_temporal.service.client import show_run

    async def go() -> Any:
        return await show_run(await temporal_client(address), run_id)

    view = run_coroutine(go())
    if as_json:
        from armature_temporal.settings import ui_url

        print_json(
            {**view.model_dump(mode="json"), "ui_url": ui_url(view.run_id, view.temporal_run_id)}
        )
    else:
        print_run(view, full=full)
