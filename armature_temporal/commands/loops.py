"""One round of a learning loop, now: ``armature improve`` and ``armature finetune``. Both
start a loop workflow and, by default, wait for it, showing its phases."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    LEARN,
    AddressOpt,
    JsonFlag,
    QueueOpt,
    SpecArg,
    err,
    fail,
    load_or_exit,
    out,
    print_json,
    run_coroutine,
    temporal_client,
)

app = typer.Typer()


@app.command(rich_help_panel=LEARN)
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

    compiled = load_or_exit(spec)
    if compiled.self_improvement is None:
        raise fail(
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


@app.command(rich_help_panel=LEARN)
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

    compiled = load_or_exit(spec)
    if compiled.finetune is None:
        raise fail(
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

        client = await temporal_client(address, start_local=True)
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
        result = run_coroutine(go())
    except WorkflowFailureError as exc:
        # The useful sentence is the innermost cause (an activity's ApplicationError).
        cause: BaseException | None = exc.cause
        while cause is not None and cause.__cause__ is not None:
            cause = cause.__cause__
        message = getattr(cause, "message", None) or str(cause)
        raise fail(f"error: {workflow_id} failed: {message}", 1) from None
    key = workflow_id.split("-", 1)[0] + "_id"
    if isinstance(result, dict):
        if as_json:
            print_json({key: result["id"], "ui_url": result["ui_url"]})
        else:
            out.print(f"started {result['id']}", markup=False)
            out.print(f"Web UI: {result['ui_url']}", markup=False)
        return None
    if as_json:
        print_json({key: workflow_id, **result.model_dump(mode="json")})
        if getattr(result, "status", None) == "failed":
            raise typer.Exit(1)
        return None
    return result


def _progress_line(progress: dict[str, Any]) -> str:
    phase = str(progress.get("phase", ""))
    if phase == "verifying":
        return (
            f"{phase} ({progress.get('runs_done')}/{progress.get('runs_total')} verification runs)"
        )
    return phase
