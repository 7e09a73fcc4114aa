"""Replay committed golden histories against today's interpreter.

A change to workflows/ that would break runs in flight (a different command sequence for the
same history) fails here. Such a change must be guarded with ``workflow.patched(...)`` once
Armature has users with runs in flight; before that (as now), regenerate the goldens with:

    ARMATURE_WRITE_GOLDEN=1 pytest tests/workflows/test_replay.py -k write
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory

from armature_temporal.runtime.models import RunInput, RunResult
from armature_temporal.service.client import decide_gate, run_outcome
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, plan_from, replayer, start, wait_for_gate
from tests.workflows.changed_interpreter import ChangedInterpreter
from worker import build_worker

GOLDEN = Path(__file__).parent / "histories"

LOOP_SPEC = """\
name: golden-loop
model_tiers:
  bad: {provider: simulate, valid_rate: 0.0}
  good: {provider: simulate}
stages:
  - id: draft
    role: {name: D, description: "v{{ _iteration.num }}", model_tier: good}
    loop: {max_iterations: 4, until: "_iteration.num >= 2"}
  - id: strict
    depends_on: [draft]
    role: {name: S, description: "{{ draft.content }}", model_tier: bad}
    output_mode: json
    output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    on_fail: {loop: {max: 2, backoff_s: 1}, escalate: true}
  - {id: maybe, depends_on: [strict], condition: "strict.n > 1000000",
     role: {name: M, description: x, model_tier: good}}
"""


def golden_files() -> list[Path]:
    """Each file is named after its run's workflow id (child ids derive from it)."""
    return sorted(GOLDEN.glob("*.json"))


def test_golden_histories_are_committed() -> None:
    names = {p.stem for p in golden_files()}
    assert {
        "quickstart",
        "customer-triage-approved",
        "research-fanout",
        "loop-retry-escalate",
        "safe-shell-approved",
        "customer-triage-verification",
    } <= names


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "passthrough"])
@pytest.mark.parametrize("path", golden_files(), ids=lambda p: p.stem)
async def test_golden_history_replays_cleanly(path: Path, strict: bool) -> None:
    history = WorkflowHistory.from_json(path.stem, path.read_text(encoding="utf-8"))
    result = await replayer(strict=strict).replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure}"


async def test_replay_catches_an_incompatible_interpreter_change() -> None:
    path = GOLDEN / "quickstart.json"
    history = WorkflowHistory.from_json("quickstart", path.read_text(encoding="utf-8"))
    result = await replayer([ChangedInterpreter]).replay_workflow(
        history, raise_on_replay_failure=False
    )
    assert result.replay_failure is not None


@pytest.mark.skipif(
    os.environ.get("ARMATURE_WRITE_GOLDEN") != "1",
    reason="writes golden histories only when ARMATURE_WRITE_GOLDEN=1",
)
async def test_write_golden_histories(client: Client, task_queue: str) -> None:
    GOLDEN.mkdir(exist_ok=True)
    for old in golden_files():
        old.unlink()

    async def save(name: str, handle_id: str) -> None:
        history = await client.get_workflow_handle(handle_id).fetch_history()
        (GOLDEN / f"{name}.json").write_text(history.to_json(), encoding="utf-8")

    async with build_worker(client, task_queue):
        quick = await start(
            client, load_plan(SPECS / "quickstart.yaml"), task_queue, run_id="quickstart"
        )
        await quick.result()
        await save("quickstart", quick.id)

        triage = await start(
            client,
            load_plan(SPECS / "customer-triage.yaml"),
            task_queue,
            run_id="customer-triage-approved",
        )
        await wait_for_gate(triage, "approve_reply")
        await decide_gate(client, triage.id, "approve_reply", "approve", comment="ok")
        await triage.result()
        await save("customer-triage-approved", triage.id)

        # The committed one was recorded before verification runs stopped approving gates:
        # it replays through the workflow.patched branch that keeps such runs as they ran.
        # Written again here, it records today's behaviour (the gate held) instead.
        verifying = await client.start_workflow(
            "RunSpec",
            RunInput(
                plan=load_plan(SPECS / "customer-triage.yaml"),
                inputs={"ticket": "I was charged twice.", "customer_tier": "pro"},
                verification=True,
            ),
            id="customer-triage-verification",
            task_queue=task_queue,
            result_type=RunResult,
        )
        await verifying.result()
        await save("customer-triage-verification", verifying.id)

        fan = await start(
            client, load_plan(SPECS / "research-fanout.yaml"), task_queue, run_id="research-fanout"
        )
        await fan.result()
        await save("research-fanout", fan.id)

        loop = await start(client, plan_from(LOOP_SPEC), task_queue, run_id="loop-retry-escalate")
        await run_outcome(loop)
        await save("loop-retry-escalate", loop.id)

        shell = await start(
            client, load_plan(SPECS / "safe-shell.yaml"), task_queue, run_id="safe-shell-approved"
        )
        await wait_for_gate(shell, "archive")
        await decide_gate(client, shell.id, "archive", "approve")
        await shell.result()
        await save("safe-shell-approved", shell.id)
