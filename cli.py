"""The ``armature`` command: parses arguments, calls the core, prints.

Data goes to stdout, diagnostics to stderr. Exit codes: 0 success, 1 failure, 2 usage error or
invalid spec. Every command that shows something takes ``--json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from armature_temporal.errors import SpecError, did_you_mean
from armature_temporal.spec.compiler import Plan, PlanStage, compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.spec.starter import starter_spec

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
SpecArg = Annotated[Path, typer.Argument(help="The spec file.", show_default=False, metavar="SPEC")]


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
    spec: SpecArg,
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
    from armature_temporal.spec.models import Spec

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

    from armature_temporal.errors import ArmatureError
    from armature_temporal.service.client import (
        ConnectionFailed,
        GateError,
        InputError,
        RunNotFound,
    )

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
    from armature_temporal.service.client import connect
    from armature_temporal.service.devstack import ensure_local_stack
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
        for child in st.children:
            child_id = str(child.get("id", "?")).removeprefix(f"{view.run_id}/")
            table.add_row(
                Text(f"  └ {child_id}"),
                str(child.get("status", "")),
                "",
                str(child.get("attempt", "")),
                Text(_short(child.get("error", ""))),
            )
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
    spec: SpecArg,
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
    from armature_temporal.service.client import ensure_search_attributes, prepare_inputs, start_run
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

    from armature_temporal.service.client import show_run

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


@app.command()
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
    one with self_improvement an improvement-loop schedule (`armature improve` on its cron,
    with the spec text as it is now: apply again after editing the spec)."""
    compiled = _load_or_exit(spec)

    async def go() -> Any:
        from armature_temporal.service.client import ensure_search_attributes
        from armature_temporal.service.schedules import apply_triggers
        from armature_temporal.settings import task_queue

        client = await _client(address, start_local=True)
        await ensure_search_attributes(client)
        return await apply_triggers(
            client,
            compiled,
            queue or task_queue(),
            delete=delete,
            spec_text=spec.read_text(encoding="utf-8"),
            spec_path=str(spec.resolve()),
        )

    changes = _run(go())
    if as_json:
        _print_json([c.model_dump() for c in changes])
        return
    if not changes:
        out.print(f"{compiled.name}: no cron triggers, no schedules", markup=False)
    for change in changes:
        cron = f" ({change.cron})" if change.cron else ""
        out.print(f"{change.action} schedule {change.schedule_id}{cron}", markup=False)


@app.command()
def improve(
    spec: SpecArg,
    verify_runs: Annotated[
        int | None,
        typer.Option(
            "--verify-runs",
            min=2,
            max=100,
            help="Recent inputs to run each version on (default: the spec's "
            "self_improvement.verify_runs).",
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait for the round and print it.")
    ] = True,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Run one round of the improvement loop on a spec now.

    Diagnoses the spec's current version from its traces, proposes single changes on its
    self_improvement.editable_surfaces (model tier, temperature, max_tokens, description),
    and verifies each by running it and the current spec on the same recent inputs (gates
    approve themselves, tool approvals are refused, bandits are not rewarded). Verified
    changes are kept as proposals: nothing is written to the spec until you run
    `armature proposals apply`. `armature schedule SPEC` runs rounds on the block's schedule.
    Exits 0 when the round finished (whatever it found), 1 when it failed, 2 on a spec
    without a self_improvement block.
    """
    import uuid

    compiled = _load_or_exit(spec)
    if compiled.self_improvement is None:
        raise _fail(
            f"error: {spec}: spec {compiled.name!r} has no self_improvement block, so the loop "
            "may change nothing; add one, e.g.\n  self_improvement:\n    editable_surfaces: "
            f"[{compiled.stages[0].id}.model_tier]",
            2,
        )
    from armature_temporal.improve.models import ImproveInput, ImproveResult

    result = _run_round(
        "Improve",
        ImproveInput(
            spec_text=spec.read_text(encoding="utf-8"),
            spec_path=str(spec.resolve()),
            verify_runs=verify_runs,
        ),
        ImproveResult,
        f"improve-{compiled.name}-{uuid.uuid4().hex[:8]}",
        f"improvement round for spec {compiled.name!r}",
        wait=wait,
        address=address,
        queue=queue,
        as_json=as_json,
    )
    if result is None:
        return
    from armature_temporal.improve.render import render_result

    out.print(render_result(result))


def _progress_line(progress: dict[str, Any]) -> str:
    phase = str(progress.get("phase", ""))
    if phase == "verifying":
        return (
            f"{phase} ({progress.get('runs_done')}/{progress.get('runs_total')} verification runs)"
        )
    return phase


def _run_round(
    workflow: str,
    payload: Any,
    result_type: type,
    workflow_id: str,
    summary: str,
    *,
    wait: bool,
    address: str | None,
    queue: str | None,
    as_json: bool,
) -> Any:
    """Start one round of a loop workflow (Improve, Finetune), ``workflow_id`` being
    ``<kind>-<spec>-<hex>``. Without ``wait`` it prints the id and link; with ``--json`` the
    result as JSON; both return None. Otherwise it returns the result for the caller to show.
    Phases go to stderr from the round's ``progress`` query. Exits 1 when the round fails."""
    from temporalio.client import WorkflowFailureError

    async def go() -> Any:
        import asyncio

        from armature_temporal.service.client import ensure_search_attributes
        from armature_temporal.settings import task_queue, ui_url

        client = await _client(address, start_local=True)
        await ensure_search_attributes(client)
        handle = await client.start_workflow(
            workflow,
            payload,
            id=workflow_id,
            task_queue=queue or task_queue(),
            result_type=result_type,
            static_summary=summary,
        )
        link = ui_url(handle.id, handle.result_run_id)
        if not wait:
            return {"id": handle.id, "ui_url": link}
        err.print(f"started {handle.id} — {link}", markup=False, highlight=False)
        result_task = asyncio.ensure_future(handle.result())
        said = ""
        while not result_task.done():
            try:
                progress = await handle.query("progress", result_type=dict)
            except Exception:  # not started yet, or done between polls
                progress = {}
            line = _progress_line(progress)
            if line and line != said:
                err.print(f"  {line}", markup=False, highlight=False)
                said = line
            await asyncio.wait({result_task}, timeout=1.0)
        return result_task.result()

    try:
        result = _run(go())
    except WorkflowFailureError as exc:
        # The useful sentence is the innermost cause (an activity's ApplicationError).
        cause: BaseException | None = exc.cause
        while cause is not None and cause.__cause__ is not None:
            cause = cause.__cause__
        message = getattr(cause, "message", None) or str(cause)
        raise _fail(f"error: {workflow_id} failed: {message}", 1) from None
    key = workflow_id.split("-", 1)[0] + "_id"
    if isinstance(result, dict):
        if as_json:
            _print_json({key: result["id"], "ui_url": result["ui_url"]})
        else:
            out.print(f"started {result['id']}", markup=False)
            out.print(f"Web UI: {result['ui_url']}", markup=False)
        return None
    if as_json:
        _print_json({key: workflow_id, **result.model_dump(mode="json")})
        if getattr(result, "status", None) == "failed":
            raise typer.Exit(1)
        return None
    return result


@app.command()
def finetune(
    spec: SpecArg,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait for the round and print it.")
    ] = True,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Run one round of the fine-tune loop on a spec now (needs the finetune extra on the
    worker).

    For each finetune.target_stages stage (default: every LLM stage) with at least
    min_examples distinct successful replies in the trace store, trains a LoRA adapter of
    finetune.lora_rank on finetune.base_model (a local directory; nothing is downloaded) for
    max_steps steps, and measures the reply loss on held-out examples before and after:
    verified when it went down. A tier `{provider: local, model: <base>, adapter: latest}`
    then uses the newest verified adapter of the calling stage. `armature schedule SPEC` runs
    rounds on finetune.schedule. Exits 0 when the round finished, 1 when it failed, 2 on a
    spec without a finetune block.
    """
    import uuid

    from armature_temporal.finetune.models import FinetuneInput, FinetuneResult

    compiled = _load_or_exit(spec)
    if compiled.finetune is None:
        raise _fail(
            f"error: {spec}: spec {compiled.name!r} has no finetune block; add one, e.g.\n"
            "  finetune:\n    base_model: models/my-small-model   # a local transformers "
            "model directory",
            2,
        )
    result = _run_round(
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


adapters_app = typer.Typer(
    help="The LoRA adapters the fine-tune loop trained.", no_args_is_help=True
)
app.add_typer(adapters_app, name="adapters")


@adapters_app.command("list")
def adapters_list(
    spec: Annotated[str | None, typer.Option("--spec", help="Only this spec's.")] = None,
    stage: Annotated[str | None, typer.Option("--stage", help="Only this stage's.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List adapters, newest first: verdict, held-out loss before → after, where it is. The
    one `adapter: latest` loads for a stage is its newest verified active one."""
    store, where = _store()
    try:
        found = store.adapters(spec=spec, stage=stage, limit=limit)
    finally:
        store.close()
    if as_json:
        _print_json([a.model_dump(mode="json") for a in found])
        return
    if not found:
        out.print(
            f"no adapters in the store at {where}; `armature finetune SPEC` trains some",
            markup=False,
        )
        return
    for a in found:
        out.print(
            f"{a.id}  {a.status}  {a.verdict}  loss {a.report.eval_loss_before:.3f} → "
            f"{a.report.eval_loss_after:.3f}  {a.examples} examples  {a.created_at[:19]}",
            markup=False,
            highlight=False,
        )
        out.print(f"    {a.path}", markup=False, highlight=False)


@adapters_app.command("retire")
def adapters_retire(
    adapter_id: Annotated[str, typer.Argument(help="The adapter id.", metavar="ID")],
) -> None:
    """Stop offering an adapter to `adapter: latest` (the files stay where they are)."""
    from armature_temporal.errors import ArmatureError

    store, _ = _store()
    try:
        store.set_adapter_status(adapter_id, "retired", expected="active")
    except ArmatureError as exc:
        raise _fail(f"error: {exc}", 2) from None
    finally:
        store.close()
    out.print(f"retired {adapter_id}", markup=False)


proposals_app = typer.Typer(
    help="Review the improvement loop's proposals, and apply or dismiss them.",
    no_args_is_help=True,
)
app.add_typer(proposals_app, name="proposals")


def _proposal_or_exit(store: Any, proposal_id: str) -> Any:
    found = store.proposal(proposal_id)
    if found is None:
        known = [p.id for p in store.proposals(limit=200)]
        raise _fail(
            f"error: no proposal {proposal_id!r}; list them with `armature proposals list`"
            + did_you_mean(proposal_id, known),
            2,
        )
    return found


@proposals_app.command("list")
def proposals_list(
    spec: Annotated[str | None, typer.Option("--spec", help="Only this spec's.")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="proposed, applied or dismissed.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List proposals, newest first, with their verdict and measured HQS change."""
    if status is not None and status not in ("proposed", "applied", "dismissed"):
        raise _fail(f"error: --status {status!r}: use proposed, applied or dismissed", 2)
    store, where = _store()
    try:
        found = store.proposals(spec=spec, status=status, limit=limit)
    finally:
        store.close()
    if as_json:
        _print_json(
            [p.model_dump(mode="json", exclude={"spec_text", "base_spec_text"}) for p in found]
        )
        return
    if not found:
        out.print(
            f"no proposals in the store at {where}; `armature improve SPEC` makes some",
            markup=False,
        )
        return
    from armature_temporal.improve.render import render_proposals

    out.print(render_proposals(found))


@proposals_app.command("show")
def proposals_show(
    proposal_id: Annotated[str, typer.Argument(help="The proposal id.", metavar="ID")],
    as_json: JsonFlag = False,
) -> None:
    """Show a proposal: the change, the evidence behind it, the paired scores and the diff."""
    store, _ = _store()
    try:
        found = _proposal_or_exit(store, proposal_id)
    finally:
        store.close()
    if as_json:
        _print_json(found.model_dump(mode="json"))
        return
    from armature_temporal.improve.render import render_proposal

    out.print(render_proposal(found))


@proposals_app.command("apply")
def proposals_apply(
    proposal_id: Annotated[str, typer.Argument(help="The proposal id.", metavar="ID")],
    spec: Annotated[
        Path,
        typer.Argument(help="The spec file to write it to.", show_default=False, metavar="SPEC"),
    ],
    force: Annotated[
        bool,
        typer.Option("--force", help="Apply a proposal whose change was not verified."),
    ] = False,
) -> None:
    """Write a proposal's change into the spec file (only if the file is exactly the text the
    proposal was made from), and mark it applied. Runs after this are a new spec version."""
    import os

    from armature_temporal.errors import ArmatureError

    store, _ = _store()
    try:
        found = _proposal_or_exit(store, proposal_id)
        if found.status != "proposed":
            raise _fail(
                f"error: proposal {proposal_id} is already {found.status}; nothing changed", 2
            )
        if found.verdict != "verified" and not force:
            raise _fail(
                f"error: proposal {proposal_id} was not verified ({found.verdict}: "
                f"{found.detail}); pass --force to apply it anyway",
                2,
            )
        try:
            current = spec.read_text(encoding="utf-8")
        except OSError as exc:
            raise _fail(f"error: cannot read {spec}: {exc.strerror}", 2) from None
        if current != found.base_spec_text:
            raise _fail(
                f"error: {spec} is not the text proposal {proposal_id} was made from (spec "
                f"{found.spec_name!r}, spec_hash {found.base_spec_hash[:12]}): it changed since, "
                "or it is another file. Run `armature improve` on it again; nothing was written",
                2,
            )
        tmp = spec.with_name(f".{spec.name}.armature-tmp")
        tmp.write_text(found.spec_text, encoding="utf-8")
        os.replace(tmp, spec)
        try:
            store.set_proposal_status(proposal_id, "applied")
        except ArmatureError as exc:
            tmp.write_text(current, encoding="utf-8")
            os.replace(tmp, spec)
            raise _fail(f"error: {exc}; {spec} left as it was", 1) from None
    finally:
        store.close()
    for change in found.changes:
        from armature_temporal.improve.render import change_label

        out.print(f"applied {proposal_id} to {spec}: {change_label(change)}", markup=False)
    out.print(
        f"spec_hash {found.candidate_spec_hash[:12]}: runs started from this file are a new "
        "version; schedules and `armature serve` keep the plan they were given until you run "
        "`armature schedule` / restart `armature serve` with it",
        markup=False,
    )


@proposals_app.command("dismiss")
def proposals_dismiss(
    proposal_id: Annotated[str, typer.Argument(help="The proposal id.", metavar="ID")],
) -> None:
    """Mark a proposal dismissed (kept in the store, no longer offered)."""
    from armature_temporal.errors import ArmatureError

    store, _ = _store()
    try:
        _proposal_or_exit(store, proposal_id)
        try:
            store.set_proposal_status(proposal_id, "dismissed")
        except ArmatureError as exc:
            raise _fail(f"error: {exc}", 2) from None
    finally:
        store.close()
    out.print(f"dismissed {proposal_id}", markup=False)


@app.command()
def serve(
    specs: Annotated[
        list[Path],
        typer.Argument(
            help="Spec files whose webhook triggers to serve.", show_default=False, metavar="SPEC"
        ),
    ],
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="TCP port to listen on.")] = 8787,
    allow_unauthenticated: Annotated[
        bool,
        typer.Option(
            "--allow-unauthenticated",
            help="Listen beyond loopback with no $ARMATURE_WEBHOOK_SECRET (anyone who can "
            "reach the port can start runs).",
        ),
    ] = False,
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Serve the specs' webhook triggers over HTTP (needs the serve extra).

    Each `triggers: [{type: webhook, path: /hooks/x, inputs: {...}}]` becomes `POST /hooks/x`:
    the JSON object in the body gives run inputs (over the trigger's inputs and the spec's
    defaults) and the answer is 202 {"run_id", "ui_url", ...}; 422 names inputs that do not
    fit. A delivery with an `Idempotency-Key` (or `X-GitHub-Delivery`) header starts at most
    one run however often it is retried (repeats answer 200 with "duplicate": true).
    With $ARMATURE_WEBHOOK_SECRET set, requests need `Authorization: Bearer <secret>` or
    `X-Armature-Signature-256: sha256=<HMAC-SHA256 of the body>`. `GET /` lists the hooks.
    Example: curl -X POST localhost:8787/hooks/triage -d '{"ticket": "refund please"}'
    """
    import asyncio
    import ipaddress
    import os

    from armature_temporal.service.webhooks import WebhookConfigError, collect_hooks, create_app

    plans = [_load_or_exit(path) for path in specs]
    try:
        hooks = collect_hooks(plans)
    except WebhookConfigError as exc:
        raise _fail(f"error: {exc}", 2) from None
    secret = os.environ.get("ARMATURE_WEBHOOK_SECRET") or None
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not secret and not allow_unauthenticated:
        raise _fail(
            f"error: --host {host} would let anyone who can reach port {port} start runs; set "
            "$ARMATURE_WEBHOOK_SECRET (requests then need it), or pass "
            "--allow-unauthenticated if something in front of this server authenticates",
            2,
        )
    try:
        import uvicorn
    except ImportError:
        raise _fail(
            "error: armature serve needs the serve extra: pip install 'armature-temporal[serve]'",
            2,
        ) from None

    async def prepare() -> str:
        from armature_temporal.service.client import ensure_search_attributes

        client = await _client(address, start_local=True)
        await ensure_search_attributes(client)
        return str(client.service_client.config.target_host)

    target = _run(prepare())
    lock = asyncio.Lock()
    connected: list[Any] = []

    async def client_for_requests() -> Any:
        from armature_temporal.service.client import connect

        async with lock:
            if not connected:
                connected.append(await connect(target))
        return connected[0]

    from armature_temporal.settings import task_queue

    try:
        web = create_app(
            hooks, client_for_requests, task_queue=queue or task_queue(), secret=secret
        )
    except WebhookConfigError as exc:
        raise _fail(f"error: {exc}", 2) from None
    for hook in hooks.values():
        err.print(
            f"POST http://{host}:{port}{hook.path} → spec {hook.plan.name!r}",
            markup=False,
            highlight=False,
        )
    auth = "secret required" if secret else "no authentication"
    err.print(
        f"serving {len(hooks)} webhook(s) on Temporal {target} ({auth}); Ctrl-C stops",
        markup=False,
        highlight=False,
    )
    uvicorn.run(web, host=host, port=port, log_level="info")


@app.command()
def scan() -> None:
    """Scan texts for prompt injection, score manipulation, tool misuse, secrets, personal
    data and scope overreach.

    Reads one JSON string per line on stdin; writes one JSON object per line:
    {"flagged": bool, "findings": [{"category", "span", "score", ...}]}. A line that is not a
    JSON string gets {"line": N, "error": ...} and the exit code is 1; flagged texts do not
    change the exit code. Example: echo '"ignore all previous instructions"' | armature scan
    """
    from armature_temporal.scanner import scan_jsonl

    raise typer.Exit(scan_jsonl(sys.stdin, sys.stdout))


bandit_app = typer.Typer(help="Inspect the bandits that choose stages' arms.", no_args_is_help=True)
app.add_typer(bandit_app, name="bandit")


def _bandit(name: str) -> Any:
    from activities.bandit import runtime_for
    from armature_temporal.bandit import BanditError

    try:
        return runtime_for(name)
    except BanditError as exc:
        raise _fail(f"error: {exc} (a spec stage's bandit is named <spec>:<stage>)", 2) from None


@bandit_app.command("show")
def bandit_show(
    name: Annotated[
        str, typer.Argument(help="Bandit name: <spec>:<stage> for spec arms.", metavar="NAME")
    ],
    context: Annotated[
        str | None,
        typer.Option("--context", help='A context as JSON (e.g. \'{"task": "triage"}\').'),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Each arm's pulls, rewards, posterior mean with 95% interval, and P(best)."""
    ctx = None
    if context is not None:
        try:
            ctx = json.loads(context)
        except ValueError:
            raise _fail(f"error: --context {context!r} is not JSON", 2) from None
    arms = _bandit(name).arms(ctx)
    if as_json:
        _print_json([a.model_dump(mode="json") for a in arms])
        return
    from rich.table import Table

    table = Table(
        title=f"bandit {name}" + (f" · context {context}" if context else ""),
        show_edge=False,
        pad_edge=False,
    )
    for col in ("arm", "status", "pulls", "rewarded", "mean", "95% interval", "P(best)"):
        table.add_column(col)
    for arm in sorted(arms, key=lambda a: -a.p_best):
        table.add_row(
            Text(arm.arm_id),
            arm.status,
            str(arm.pulls),
            f"{arm.reward_sum:.1f}",
            f"{arm.mean:.3f}",
            f"[{arm.low:.3f}, {arm.high:.3f}]",
            f"{arm.p_best:.2f}",
        )
    out.print(table)


@bandit_app.command("history")
def bandit_history(
    name: Annotated[str, typer.Argument(help="Bandit name.", metavar="NAME")],
    as_json: JsonFlag = False,
) -> None:
    """The learning curve: posterior snapshots taken by bandit maintenance."""
    snapshots = _bandit(name).history()
    if as_json:
        _print_json([s.model_dump(mode="json") for s in snapshots])
        return
    if not snapshots:
        out.print(
            f"no snapshots for {name} yet; maintenance takes them (armature schedule SPEC "
            "sets it up for specs with arms)",
            markup=False,
        )
        return
    for snap in snapshots:
        out.print(
            f"{snap.at[:19]}  {snap.arm_id:<20} pulls {snap.pulls:<6} mean {snap.mean:.3f}",
            markup=False,
        )


@app.command()
def reward(
    decision_id: Annotated[
        str,
        typer.Argument(
            help="The decision id (from a trace or runtime_select).", metavar="DECISION_ID"
        ),
    ],
    value: Annotated[float, typer.Argument(help="Reward in [0, 1].", metavar="VALUE")],
    bandit: Annotated[
        str | None,
        typer.Option("--bandit", help="Bandit name (default: the part of DECISION_ID before '@')."),
    ] = None,
) -> None:
    """Reward a bandit decision from outside (stages with reward: external). Once per decision;
    values outside [0, 1] are refused."""
    from armature_temporal.bandit import BanditError

    name = bandit or decision_id.partition("@")[0]
    try:
        receipt = _bandit(name).update(decision_id, value)
    except BanditError as exc:
        raise _fail(f"error: {exc}", 2) from None
    out.print(
        f"rewarded {decision_id} with {value:g}"
        + (" (change detected: posteriors reset)" if receipt.change_detected else ""),
        markup=False,
    )


runs_app = typer.Typer(help="List and inspect runs.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")


@runs_app.command("list")
def runs_list(
    spec: Annotated[str | None, typer.Option("--spec", help="Only runs of this spec name.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="How many, newest first.")] = 20,
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first.

    When the Temporal server cannot be reached, lists the runs the trace store recorded instead,
    and says so on stderr.
    """
    from armature_temporal.service.client import ConnectionFailed, list_runs

    async def go() -> tuple[Any, ConnectionFailed | None]:
        try:
            client = await _client(address)
        except ConnectionFailed as exc:
            return [], exc
        return await list_runs(client, spec=spec, limit=limit), None

    runs, down = _run(go())
    if down is not None:
        runs, where = _stored_runs(spec, limit)
        if not runs:
            raise _fail(f"error: {down}; the trace store at {where} has no runs to show instead")
        err.print(
            f"{down}\nshowing runs from the trace store at {where} instead: statuses as last "
            "recorded; whether a run waits at a gate is not known there",
            markup=False,
            highlight=False,
        )
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
    from armature_temporal.service.client import show_run

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
    from armature_temporal.service.client import cancel_run

    async def go() -> None:
        await cancel_run(await _client(address), run_id)

    _run(go())
    out.print(f"cancel requested for {run_id}", markup=False)


def _decide(
    run_id: str, stage: str, decision: Any, comment: str | None, address: str | None
) -> None:
    import getpass

    from armature_temporal.service.client import decide_gate

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
    """List runs waiting for a person, with each waiting gate and its message.

    Runs are found by the ArmatureWaitingGate search attribute and asked for their gates;
    a run whose workers do not answer within 5 s is listed with that problem instead.
    """
    from armature_temporal.service.client import waiting_gates

    async def go() -> Any:
        return await waiting_gates(await _client(address), spec=spec)

    found = _run(go())
    if as_json:
        _print_json(
            [
                {
                    "run_id": run.run_id,
                    "spec_name": run.spec_name,
                    "gates": [g.model_dump() for g in pending] if isinstance(pending, list) else [],
                    "problem": pending if isinstance(pending, str) else None,
                }
                for run, pending in found
            ]
        )
        return
    if not found:
        out.print("no runs are waiting at a gate", markup=False)
        return
    for run, pending in found:
        if isinstance(pending, str):
            out.print(f"{run.run_id}  (gates unknown: {pending})", markup=False, highlight=False)
            continue
        for gate in pending:
            out.print(
                f"{run.run_id}  {gate.stage}  since {gate.since[:19]}  "
                f"{_short(gate.message or '', 60)}",
                markup=False,
                highlight=False,
            )
            out.print(f"    armature approve {run.run_id} {gate.stage}", markup=False)


# --- traces: report, dashboard, verify, export ----------------------------------------------


def _store() -> tuple[Any, str]:
    """The trace store ($ARMATURE_DB_URL, else SQLite under $ARMATURE_HOME) and where it is
    (for messages), or exit 1.

    Reading never creates a SQLite file: when there is none yet, an empty store in memory
    stands in for it.
    """
    from armature_temporal.errors import ArmatureError
    from armature_temporal.store import TraceStore, database_url

    url = database_url()
    missing = url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists()
    try:
        store = TraceStore("sqlite:///:memory:" if missing else url)
    except ArmatureError as exc:
        raise _fail(f"error: {exc}", 1) from None
    return store, url if missing else str(store.engine.url.render_as_string(hide_password=True))


def _stored_runs(spec: str | None, limit: int) -> tuple[list[Any], str]:
    """Runs as the trace store recorded them (for when Temporal is unreachable), and where
    that store is."""
    from armature_temporal.service.client import RunSummary

    store, where = _store()
    try:
        rows = store.runs(spec=spec, limit=limit)
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


def _spec_name(spec: str) -> str:
    """A spec name as given, or the name inside a spec file when given a path to one."""
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return _load_or_exit(path).name
    return spec


def _unknown_spec(store: Any, where: str, spec: str) -> typer.Exit:
    from armature_temporal.errors import did_you_mean

    known = sorted({r.spec_name for r in store.runs(limit=10_000)})
    return _fail(
        f"error: no runs of spec {spec!r} in the trace store at {where}; specs with "
        f"runs: {known or 'none yet'}{did_you_mean(spec, known)}",
        2,
    )


@app.command()
def report(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    as_json: JsonFlag = False,
) -> None:
    """Show a run from the trace store: its stages, every attempt (tier, model, validity,
    latency, tokens, cost, error), tool calls, gate decisions, HQS and cost.

    Reads only the trace store, so it works for finished runs when the Temporal server is
    gone. Exits 2 when the store has no such run.
    """
    from armature_temporal.errors import did_you_mean
    from armature_temporal.views import build_report, load_run, render_report

    store, where = _store()
    found = load_run(store, run_id)
    if found is None:
        recent = [r.run_id for r in store.runs(limit=200)]
        raise _fail(
            f"error: no run {run_id!r} in the trace store at {where}; list runs with "
            f"`armature runs list`{did_you_mean(run_id, recent)}",
            2,
        )
    view = build_report(*found)
    if as_json:
        _print_json(view.model_dump(mode="json"))
    else:
        out.print(render_report(view))


@app.command()
def dashboard(
    spec: Annotated[
        str | None,
        typer.Argument(
            help="A spec name (or spec file); without one, every spec in one line each.",
            metavar="SPEC",
            show_default=False,
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Redraw every --interval seconds until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between redraws with --watch.", min=0.2)
    ] = 2.0,
    limit: Annotated[int, typer.Option("--limit", help="Read the newest N runs.", min=1)] = 500,
    as_json: JsonFlag = False,
) -> None:
    """Show how a spec is doing, from the trace store: HQS per spec version (with a
    sparkline of its trend), failure taxonomy counts, run latency p50/p95, tokens and cost,
    and the configurations (stage, tier, model, arm) its attempts used.

    Invalid model attempts each count as output_invalid; other failures count once per
    stage. With --watch --json, prints one JSON document per line at each redraw. Exits 2
    when the store has no runs of SPEC.
    """
    from armature_temporal.views import (
        build_dashboard,
        build_overview,
        load_runs,
        render_dashboard,
        render_overview,
    )

    store, where = _store()
    name = _spec_name(spec) if spec else None

    def snapshot() -> tuple[Any, Any]:
        if name is None:
            specs = build_overview(load_runs(store, limit=limit, records=False))
            return [s.model_dump(mode="json") for s in specs], render_overview(specs)
        board = build_dashboard(name, load_runs(store, spec=name, limit=limit))
        return board.model_dump(mode="json"), render_dashboard(board)

    data, shown = snapshot()
    if name is not None and not data["runs"] and not watch:
        raise _unknown_spec(store, where, name)
    if not watch:
        if as_json:
            _print_json(data)
        elif name is None and not data:
            out.print(
                "no runs in the trace store yet — start one with: "
                "armature submit specs/quickstart.yaml",
                markup=False,
            )
        else:
            out.print(shown)
        return
    import time

    try:
        if as_json:
            while True:
                sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str) + "\n")
                sys.stdout.flush()
                time.sleep(interval)
                data, shown = snapshot()
        from rich.live import Live

        with Live(shown, console=out, auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                data, shown = snapshot()
                live.update(shown, refresh=True)
    except KeyboardInterrupt:
        return


traces_app = typer.Typer(help="Check the trace store.", no_args_is_help=True)
app.add_typer(traces_app, name="traces")


@traces_app.command("verify")
def traces_verify(
    run_id: Annotated[
        str | None,
        typer.Argument(help="Check only this run.", metavar="RUN", show_default=False),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Check that no trace record was edited, deleted, inserted or reordered.

    Recomputes each run's hash chain (every run's, or RUN's) and prints, for each broken
    run, the first record where its chain breaks. Exits 0 when every chain holds, 1 when
    any is broken, 2 when RUN is not in the store.
    """
    store, where = _store()
    if run_id is not None and store.run(run_id) is None and not store.records(run_id):
        raise _fail(f"error: no run {run_id!r} in the trace store at {where}", 2)
    checked, breaks = store.verify([run_id] if run_id is not None else None)
    if as_json:
        _print_json(
            {
                "checked": checked,
                "ok": not breaks,
                "breaks": [b.model_dump(mode="json") for b in breaks],
            }
        )
    elif not breaks:
        out.print(f"{checked} run(s) checked: every chain is intact", markup=False)
    else:
        for b in breaks:
            out.print(f"{b.run_id}: {b.problem}: {b.detail}", markup=False, highlight=False)
        err.print(f"{len(breaks)} of {checked} run(s) have a broken chain", markup=False)
    if breaks:
        raise typer.Exit(1)


@app.command("export-traces")
def export_traces(
    spec: Annotated[
        str, typer.Option("--spec", help="The spec name (or spec file) to export from.")
    ],
    fmt: Annotated[
        Literal["sft", "dpo"],
        typer.Option("--format", help="sft (supervised rows) or dpo (preference pairs)."),
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The JSON Lines file to write.", metavar="FILE")
    ],
    stage: Annotated[
        str | None, typer.Option("--stage", help="Only this stage's attempts.")
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            help="sft only: keep rows from runs whose mean judge score (or HQS, for runs "
            "without judges) is at least X.",
            metavar="X",
            min=0.0,
            max=1.0,
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Write training data from a spec's traces as JSON Lines, one object per line.

    sft: one row per valid attempt of a stage that completed, {"messages": [the chat
    messages the model was sent], "output": "the reply"}.

    dpo: pairs of attempts sent the same messages (same inputs_hash) where one did better,
    {"prompt": [chat messages], "chosen": "reply", "rejected": "reply"}. A valid output beats
    an invalid one; between valid outputs of a stage a downstream judge scored, the higher
    judge score wins. Each group's best attempt is paired with every attempt it beats.

    A reply is the text of a text stage, compact JSON for a JSON stage. Attempts recorded
    without their messages are skipped. A count summary goes to stderr (and, with --json,
    to stdout as JSON). Exits 2 when the store has no runs of the spec or no such stage.
    """
    from armature_temporal.finetune.export import dpo_rows, sft_rows, write_jsonl
    from armature_temporal.views import load_runs

    if min_score is not None and fmt != "sft":
        raise _fail("error: --min-score applies to --format sft only", 2)
    name = _spec_name(spec)
    store, where = _store()
    runs = load_runs(store, spec=name, limit=10**9)
    if not runs:
        raise _unknown_spec(store, where, name)
    if stage is not None:
        from armature_temporal.errors import did_you_mean

        seen = sorted(
            {r.stage_id or "" for run in runs for r in run.records if r.kind == "attempt"}
        )
        if stage not in seen:
            raise _fail(
                f"error: spec {name!r} has no model attempts of stage {stage!r}; stages with "
                f"attempts: {seen or 'none'}{did_you_mean(stage, seen)}",
                2,
            )
    if fmt == "sft":
        rows, stats = sft_rows(runs, spec=name, stage=stage, min_score=min_score)
    else:
        rows, stats = dpo_rows(runs, spec=name, stage=stage)
    try:
        write_jsonl(rows, output)
    except OSError as exc:
        raise _fail(f"error: cannot write {output}: {exc}", 1) from None
    err.print(stats.summary(output), markup=False, highlight=False)
    if as_json:
        _print_json({**stats.model_dump(mode="json"), "output": str(output)})


@app.command()
def worker(
    address: AddressOpt = None,
    queue: QueueOpt = None,
) -> None:
    """Run an Armature worker in the foreground (as many as you like per task queue)."""
    import asyncio
    import signal

    from armature_temporal.service.client import connect
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

    from armature_temporal.service.devstack import ensure_local_stack, stack_state, stop_stack
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
    from armature_temporal.service.devstack import stop_stack

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
