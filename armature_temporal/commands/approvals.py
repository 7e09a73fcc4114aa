"""A person's decisions at human gates: ``armature approve``, ``reject`` and ``gates`` (the
runs waiting for one)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    RUN,
    AddressOpt,
    JsonFlag,
    out,
    print_json,
    run_coroutine,
    temporal_client,
)

app = typer.Typer()


def _decide(
    run_id: str, stage: str, decision: Any, comment: str | None, address: str | None
) -> None:
    from armature_temporal.runtime.gate_auth import os_user
    from armature_temporal.service.client import decide_gate

    async def go() -> str:
        return await decide_gate(
            await temporal_client(address, start_local=True),
            run_id,
            stage,
            decision,
            comment=comment,
            by=os_user(),
        )

    out.print(run_coroutine(go()), markup=False)


@app.command(rich_help_panel=RUN)
def approve(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    stage: Annotated[str, typer.Argument(help="The gate's stage id.", metavar="STAGE")],
    comment: Annotated[
        str | None, typer.Option("--comment", help="Why; kept with the decision.")
    ] = None,
    address: AddressOpt = None,
) -> None:
    """Approve a stage waiting at a human gate. Exits 2, changing nothing, if it is not
    waiting.

    The decision is recorded as yours (your account's name, by uid), proved with the trace
    key under ARMATURE_HOME, which the run's workers must share; without a key here nothing
    is sent (exit 2).

    With no --address and no $TEMPORAL_ADDRESS, the local stack is started if needed, as
    `armature submit` does."""
    _decide(run_id, stage, "approve", comment, address)


@app.command(rich_help_panel=RUN)
def reject(
    run_id: Annotated[str, typer.Argument(help="The run id.", metavar="RUN")],
    stage: Annotated[str, typer.Argument(help="The gate's stage id.", metavar="STAGE")],
    reason: Annotated[str, typer.Option("--reason", help="Why it is rejected (required).")],
    address: AddressOpt = None,
) -> None:
    """Reject a stage waiting at a human gate; the run ends rejected. Recorded as yours, as
    `armature approve` records it.

    With no --address and no $TEMPORAL_ADDRESS, the local stack is started if needed, as
    `armature submit` does."""
    _decide(run_id, stage, "reject", reason, address)


@app.command(rich_help_panel=RUN)
def gates(
    spec: Annotated[str | None, typer.Option("--spec", help="Only runs of this spec name.")] = None,
    address: AddressOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """List runs waiting for a person, with each waiting gate and its whole message (for a
    tool call waiting for approval, the tool and its arguments), wrapped to the width.

    Runs are found by the ArmatureWaitingGate search attribute and asked for their gates;
    a run whose workers do not answer within 5 s is listed with that problem instead. With
    no --address and no $TEMPORAL_ADDRESS, the local stack is started if needed, as
    `armature submit` does.
    """
    from armature_temporal.service.client import waiting_gates

    async def go() -> Any:
        return await waiting_gates(await temporal_client(address, start_local=True), spec=spec)

    found = run_coroutine(go())
    if as_json:
        print_json(
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
    from rich.padding import Padding
    from rich.text import Text

    for run, pending in found:
        if isinstance(pending, str):
            out.print(f"{run.run_id}  (gates unknown: {pending})", markup=False, highlight=False)
            continue
        for gate in pending:
            out.print(
                f"{run.run_id}  {gate.stage}  since {gate.since[:19]}",
                markup=False,
                highlight=False,
            )
            if gate.message:
                # Whole (a tool call's arguments are in it), wrapped at the console's width.
                out.print(Padding(Text(gate.message), (0, 0, 0, 4)), soft_wrap=False)
            out.print(
                f"    armature approve {run.run_id} {gate.stage}   |   "
                f"armature reject {run.run_id} {gate.stage} --reason ...",
                markup=False,
                highlight=False,
            )
