"""The ``armature`` command: parses arguments, calls the core, prints.

Data goes to stdout, diagnostics to stderr. Exit codes: 0 success, 1 failure, 2 usage error or
invalid spec. Every command that shows something takes ``--json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from armature_temporal.compiler import Plan, PlanStage, compile_spec
from armature_temporal.errors import SpecError
from armature_temporal.loader import load_spec
from armature_temporal.starter import starter_spec

app = typer.Typer(
    name="armature",
    help="Durable LLM agent workflows on Temporal. Write a spec in YAML, validate it, run it.\n\n"
    "Try: armature submit specs/quickstart.yaml --wait   (offline, no API key)\n\n"
    "Yours: armature new my-flow.yaml && armature validate my-flow.yaml",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


@app.command()
def validate(
    specs: Annotated[
        list[Path], typer.Argument(help="Spec files to check.", show_default=False, metavar="SPEC")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Check spec files and report every problem with file:line:column and a fix.

    Exits 0 when all are valid, 2 when any is not.
    """
    results = []
    for path in specs:
        try:
            plan = compile_spec(load_spec(path))
        except SpecError as exc:
            results.append(
                {"path": str(path), "valid": False, "errors": [i.to_dict() for i in exc.issues]}
            )
            if not as_json:
                for issue in exc.issues:
                    err.print(str(issue), markup=False, highlight=False)
            continue
        results.append(
            {
                "path": str(path),
                "valid": True,
                "errors": [],
                "name": plan.name,
                "stages": len(plan.stages),
                "spec_hash": plan.spec_hash,
            }
        )
        if not as_json:
            out.print(
                f"{path}: ok — {plan.name!r}, {len(plan.stages)} stages, "
                f"spec_hash {plan.spec_hash[:12]}",
                markup=False,
                highlight=False,
            )
    if as_json:
        _print_json(results)
    bad = sum(not r["valid"] for r in results)
    if bad:
        if not as_json:
            err.print(f"{bad} of {len(results)} spec(s) invalid", markup=False)
        raise typer.Exit(2)


def _load_or_exit(path: Path) -> Plan:
    try:
        return compile_spec(load_spec(path))
    except SpecError as exc:
        for issue in exc.issues:
            err.print(str(issue), markup=False, highlight=False)
        raise typer.Exit(2) from None


def _stage_label(stage: PlanStage) -> str:
    parts = [f"[bold]{stage.id}[/bold]"]
    if stage.role is not None:
        parts.append(f"{stage.role.type} · tier {stage.role.model_tier}")
        if stage.role.tools:
            parts.append(f"tools {', '.join(stage.role.tools)}")
    elif stage.tool is not None:
        parts.append(f"tool {stage.tool.name}")
    elif stage.kind == "fan_out":
        parts.append(f"fan_out {stage.fan_out} → fan_in {stage.fan_in}")
    if stage.output_mode != "text":
        parts.append(stage.output_mode)
    if stage.max_attempts > 1:
        parts.append(f"retry ×{stage.max_attempts}")
    if stage.escalate and stage.escalation_ladder:
        parts.append(f"escalate → {' → '.join(stage.escalation_ladder)}")
    if stage.loop is not None:
        parts.append(f"loop ≤{stage.loop.max_iterations}")
    if stage.gate is not None:
        parts.append("[yellow]human gate[/yellow]")
    if stage.arms:
        parts.append(f"arms {', '.join(a.arm_id for a in stage.arms)}")
    if stage.condition or stage.skip_if:
        parts.append("conditional")
    return " · ".join(parts)


def _fold(markup: str) -> Text:
    return Text.from_markup(markup, overflow="fold")


def _plan_tree(plan: Plan, title: str) -> Tree:
    tree = Tree(_fold(title))
    by_id = {s.id: s for s in plan.stages}
    dependents: dict[str, list[str]] = {s.id: [] for s in plan.stages}
    for s in plan.stages:
        for d in s.depends_on:
            dependents[d].append(s.id)
    shown: set[str] = set()

    def add(node: Tree, sid: str, parent: str | None) -> None:
        stage = by_id[sid]
        others = [d for d in stage.depends_on if d != parent]
        label = _stage_label(stage)
        if sid in shown:
            node.add(_fold(f"{sid} [dim](shown above)[/dim]"))
            return
        if others:
            label += f" [dim](also after {', '.join(others)})[/dim]"
        shown.add(sid)
        branch = node.add(_fold(label))
        if sid in plan.children:
            child = plan.children[sid]
            branch.add(_plan_tree(child, f"[cyan]subagent {child.name}[/cyan]"))
        for nxt in dependents[sid]:
            # Show a stage under the last of its dependencies, once all are shown.
            if by_id[nxt].depends_on[-1] == sid or all(d in shown for d in by_id[nxt].depends_on):
                add(branch, nxt, sid)

    for s in plan.stages:
        if not s.depends_on and not s.post_run:
            add(tree, s.id, None)
    post = [s for s in plan.stages if s.post_run]
    if post:
        after = tree.add(_fold("[dim]after the DAG completes (post_run)[/dim]"))
        for s in post:
            after.add(_fold(_stage_label(s)))
    return tree


@app.command()
def plan(
    spec: Annotated[
        Path, typer.Argument(help="The spec file.", show_default=False, metavar="SPEC")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Show the compiled plan: the stage DAG with tiers, retries, gates and fan-out."""
    compiled = _load_or_exit(spec)
    if as_json:
        sys.stdout.write(compiled.to_json() + "\n")
        return
    title = (
        f"[bold]{compiled.name}[/bold] v{compiled.version} · "
        f"spec_hash {compiled.spec_hash[:12]} · policy {compiled.policy_version[:12]}"
    )
    out.print(_plan_tree(compiled, title), soft_wrap=False)
    tiers = ", ".join(
        f"{t.name}={t.provider}{'/' + t.model if t.model else ''}" for t in compiled.tiers.values()
    )
    out.print(f"[dim]tiers (smallest first): {tiers}[/dim]")


@app.command()
def schema() -> None:
    """Print the JSON Schema of the spec language (for editor completion)."""
    from armature_temporal.spec import Spec

    _print_json(Spec.model_json_schema())


@app.command()
def new(
    path: Annotated[
        Path, typer.Argument(help="Where to write the starter spec.", metavar="PATH")
    ] = Path("armature.yaml"),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented starter spec that validates and runs offline."""
    if path.exists() and not force:
        err.print(f"{path} already exists; choose another path or pass --force", markup=False)
        raise typer.Exit(2)
    path.write_text(starter_spec(str(path)), encoding="utf-8")
    out.print(f"wrote {path}; next: armature validate {path} && armature plan {path}", markup=False)


# --- running --------------------------------------------------------------------------------

AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address",
        help="Temporal server host:port (default: $TEMPORAL_ADDRESS, else "
        "the local dev server, started if needed).",
    ),
]
QueueOpt = Annotated[
    str | None,
    typer.Option("--task-queue", help="Task queue (default: $ARMATURE_TASK_QUEUE or 'armature')."),
]


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(message, markup=False, highlight=False)
    return typer.Exit(code)


def _run(coro: Any) -> Any:
    """Run a coroutine, turning Armature's errors into clean messages and exit codes."""
    import asyncio

    from armature_temporal.client import ConnectionFailed, GateError, InputError, RunNotFound
    from armature_temporal.errors import ArmatureError

    try:
        return asyncio.run(coro)
    except (InputError, GateError) as exc:
        raise _fail(f"error: {exc}", 2) from None
    except RunNotFound as exc:
        raise _fail(f"error: {exc}", 2) from None
    except ConnectionFailed as exc:
        raise _fail(f"error: {exc}", 1) from None
    except ArmatureError as exc:
        raise _fail(f"error: {exc}", 1) from None


async def _client(address: str | None, *, start_local: bool = False) -> Any:
    from armature_temporal.client import connect
    from armature_temporal.devstack import ensure_local_stack
    from armature_temporal.settings import configured_address, dev_port

    if start_local:
        addr, said = await ensure_local_stack(address)
        for line in said:
            err.print(line, markup=False, highlight=False)
    else:
        addr = configured_address(address) or f"127.0.0.1:{dev_port()}"
    return await connect(addr)


def _parse_inputs(pairs: list[str], inputs_file: Path | None) -> dict[str, Any]:
    values: dict[str, Any] = {}
    if inputs_file is not None:
        try:
            loaded = json.loads(inputs_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise _fail(f"error: --inputs {inputs_file}: {exc}", 2) from None
        if not isinstance(loaded, dict):
            raise _fail(f"error: --inputs {inputs_file} must hold a JSON object", 2)
        values.update(loaded)
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise _fail(f"error: --input {pair!r} must look like name=value", 2)
        try:
            values[name] = json.loads(raw) if raw[:1] in '[{"' else raw
        except ValueError:
            values[name] = raw
    return values


def _short(value: Any, width: int = 70) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _print_run(view: Any) -> None:
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
    table = Table(show_edge=False, pad_edge=False)
    for col in ("stage", "status", "tier", "attempts", "output / error"):
        table.add_column(col, overflow="fold")
    for sid, st in view.stages.items():
        detail = _short(st.error) if st.error and st.status != "completed" else _short(st.output)
        if st.escalated:
            detail = "(escalated) " + detail
        table.add_row(sid, st.status, st.tier or "", str(st.attempts or ""), Text(detail))
    out.print(table)
    for gate in view.pending_gates:
        out.print(Text(f"waiting at gate {gate.stage}: {gate.message or ''}", style="yellow"))
        out.print(
            f"  armature approve {view.run_id} {gate.stage}   |   "
            f"armature reject {view.run_id} {gate.stage} --reason ...",
            markup=False,
        )
    out.print(f"Web UI: {ui_url(view.run_id, view.temporal_run_id)}", markup=False)


@app.command()
def submit(
    spec: Annotated[
        Path, typer.Argument(help="The spec file.", show_default=False, metavar="SPEC")
    ],
    input_pairs: Annotated[
        list[str] | None,
        typer.Option(
            "--input", "-i", help="A run input as name=value (JSON values allowed); repeatable."
        ),
    ] = None,
    inputs_file: Annotated[
        Path | None, typer.Option("--inputs", help="A JSON file with the run inputs.")
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait for the run to finish, showing progress, then print every stage's output.",
        ),
    ] = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Compile a spec and run it as a Temporal workflow.

    Prints the run id and its Web UI link. With no --address and no $TEMPORAL_ADDRESS, the
    local stack (Temporal dev server + worker, under $ARMATURE_HOME) is started if needed.
    Exits 0 when the run was started (or, with --wait, completed), 1 when it failed or was
    rejected, 2 on an invalid spec or inputs.
    """
    compiled = _load_or_exit(spec)
    values = _parse_inputs(input_pairs or [], inputs_file)
    _run(_submit(compiled, values, wait, address, queue, as_json))


async def _submit(
    plan: Plan,
    values: dict[str, Any],
    wait: bool,
    address: str | None,
    queue: str | None,
    as_json: bool,
) -> None:
    from armature_temporal.client import ensure_search_attributes, prepare_inputs, start_run
    from armature_temporal.settings import task_queue, ui_url

    inputs = prepare_inputs(plan, values)
    client = await _client(address, start_local=True)
    await ensure_search_attributes(client)
    handle = await start_run(client, plan, inputs, task_queue=queue or task_queue())
    link = ui_url(handle.id, handle.result_run_id)
    if not wait:
        if as_json:
            _print_json(
                {"run_id": handle.id, "temporal_run_id": handle.result_run_id, "ui_url": link}
            )
        else:
            out.print(f"started run {handle.id}", markup=False)
            out.print(f"Web UI: {link}", markup=False)
            out.print(f"follow it: armature runs show {handle.id}", markup=False)
        return
    err.print(f"started run {handle.id} — {link}", markup=False, highlight=False)
    view = await _follow(client, handle.id)
    if as_json:
        _print_json({**view.model_dump(mode="json"), "ui_url": link})
    else:
        _print_run(view)
    if (view.state or view.status) != "completed":
        raise typer.Exit(1)


async def _follow(client: Any, run_id: str) -> Any:
    """Poll the run, reporting stage transitions on stderr, until it closes."""
    import asyncio

    from armature_temporal.client import show_run

    seen: dict[str, str] = {}
    told: set[str] = set()
    while True:
        view = await show_run(client, run_id)
        for sid, st in view.stages.items():
            if st.status != "pending" and seen.get(sid) != st.status:
                seen[sid] = st.status
                extra = f" (attempt {st.attempts}, tier {st.tier})" if st.attempts > 1 else ""
                err.print(f"  {sid}: {st.status}{extra}", markup=False, highlight=False)
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
        if view.status != "running":
            return view
        await asyncio.sleep(0.5)


runs_app = typer.Typer(help="List and inspect runs.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def runs_list(
    spec: Annotated[str | None, typer.Option("--spec", help="Only runs of this spec name.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many, newest first.")] = 20,
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first."""
    from armature_temporal.client import list_runs

    async def go() -> Any:
        return await list_runs(await _client(address), spec=spec, limit=limit)

    runs = _run(go())
    if as_json:
        _print_json([r.model_dump() for r in runs])
        return
    if not runs:
        out.print(
            "no runs yet — start one with: armature submit specs/quickstart.yaml", markup=False
        )
        return
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False)
    for col in ("run", "spec", "status", "started"):
        table.add_column(col)
    for r in runs:
        status = r.status + (
            " (waiting at a gate)" if r.waiting_gate and r.status == "running" else ""
        )
        table.add_row(Text(r.run_id), Text(r.spec_name or ""), status, (r.started or "")[:19])
    out.print(table)


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Show a run: stages, status, attempts, outputs and pending gates."""
    from armature_temporal.client import show_run

    async def go() -> Any:
        return await show_run(await _client(address), run_id)

    view = _run(go())
    if as_json:
        from armature_temporal.settings import ui_url

        _print_json(
            {**view.model_dump(mode="json"), "ui_url": ui_url(view.run_id, view.temporal_run_id)}
        )
    else:
        _print_run(view)


@app.command()
def cancel(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    address: AddressOpt = None,
) -> None:
    """Cancel a running run (running stages are cancelled too)."""
    from armature_temporal.client import cancel_run

    async def go() -> None:
        await cancel_run(await _client(address), run_id)

    _run(go())
    out.print(f"cancel requested for {run_id}", markup=False)


def _decide(
    run_id: str, stage: str, decision: Any, comment: str | None, address: str | None
) -> None:
    import getpass

    from armature_temporal.client import decide_gate

    async def go() -> str:
        return await decide_gate(
            await _client(address), run_id, stage, decision, comment=comment, by=getpass.getuser()
        )

    out.print(_run(go()), markup=False)


@app.command()
def approve(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    stage: Annotated[str, typer.Argument(help="The gate's stage id.", metavar="STAGE")],
    comment: Annotated[
        str | None, typer.Option("--comment", help="Why; kept with the decision.")
    ] = None,
    address: AddressOpt = None,
) -> None:
    """Approve a stage waiting at a human gate. Exits 2, changing nothing, if it is not
    waiting."""
    _decide(run_id, stage, "approve", comment, address)


@app.command()
def reject(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    stage: Annotated[str, typer.Argument(help="The gate's stage id.", metavar="STAGE")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is rejected (required).")],
    address: AddressOpt = None,
) -> None:
    """Reject a stage waiting at a human gate; the run ends rejected."""
    _decide(run_id, stage, "reject", reason, address)


@app.command()
def gates(
    spec: Annotated[str | None, typer.Option("--spec", help="Only runs of this spec name.")] = None,
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """List runs waiting for a person, with each waiting gate and its message."""
    from armature_temporal.client import waiting_gates

    async def go() -> Any:
        return await waiting_gates(await _client(address), spec=spec)

    found = _run(go())
    if as_json:
        _print_json(
            [
                {
                    "run_id": run.run_id,
                    "spec_name": run.spec_name,
                    "gates": [g.model_dump() for g in pending],
                }
                for run, pending in found
            ]
        )
        return
    if not found:
        out.print("no runs are waiting at a gate", markup=False)
        return
    for run, pending in found:
        for gate in pending:
            out.print(
                f"{run.run_id}  {gate.stage}  since {gate.since[:19]}  "
                f"{_short(gate.message or '', 60)}",
                markup=False,
                highlight=False,
            )
            out.print(f"    armature approve {run.run_id} {gate.stage}", markup=False)


@app.command()
def worker(
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Run an Armature worker in the foreground (as many as you like per task queue)."""
    import asyncio
    import signal

    from armature_temporal.client import connect
    from armature_temporal.settings import configured_address, dev_port, task_queue

    addr = configured_address(address) or f"127.0.0.1:{dev_port()}"
    tq = queue or task_queue()

    async def go() -> None:
        from worker import build_worker

        client = await connect(addr)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with build_worker(client, tq):
            err.print(f"armature worker on {addr}, task queue {tq!r}; Ctrl-C stops", markup=False)
            await stop.wait()
        err.print("worker stopped", markup=False)

    _run(go())


dev_app = typer.Typer(
    help="Run the local single-machine stack (Temporal dev server + worker) in the foreground; "
    "Ctrl-C stops it. `armature dev stop` stops one running in the background.",
    invoke_without_command=True,
)
app.add_typer(dev_app, name="dev")


@dev_app.callback()
def dev(ctx: typer.Context) -> None:
    """Run the local stack in the foreground (Ctrl-C stops it); `armature dev stop` stops a
    background one."""
    if ctx.invoked_subcommand is not None:
        return
    import time

    from armature_temporal.devstack import ensure_local_stack, stack_state, stop_stack
    from armature_temporal.settings import dev_ui_port

    address, said = _run(ensure_local_stack(None))
    for line in said:
        err.print(line, markup=False)
    if not said:
        err.print(f"the local stack is already running on {address}", markup=False)
    out.print(
        f"Temporal at {address}, Web UI http://localhost:{dev_ui_port()}; Ctrl-C stops",
        markup=False,
    )
    try:
        while True:
            state = stack_state()
            if state.server_pid is None and not state.listening:
                raise _fail("the dev server exited; see the log under $ARMATURE_HOME/logs")
            time.sleep(1)
    except KeyboardInterrupt:
        for line in stop_stack():
            err.print(f"stopped {line}", markup=False)


@dev_app.command("stop")
def dev_stop() -> None:
    """Stop the background dev server and worker that `armature submit` or `armature dev`
    started."""
    from armature_temporal.devstack import stop_stack

    stopped = stop_stack()
    out.print(
        "stopped " + ", ".join(stopped) if stopped else "the local stack is not running",
        markup=False,
    )


def main() -> None:
    """Console-script entry point.

    Exits through ``os._exit`` once output is flushed: the Temporal SDK's native runtime can
    abort the interpreter during finalisation (temporalio/sdk-python#300), which would turn a
    clean exit code into 134.
    """
    import os

    try:
        app()
        code: int = 0
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
