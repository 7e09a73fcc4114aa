"""Every example spec in specs/ runs to its end on a real Temporal dev server, unattended: as
verification runs (no gate is approved: a stage gate holds the stages from it on, tool
approvals are refused), with the spec's default inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.knowledge.spec_sources import index_spec_knowledge, spec_embedder
from armature_temporal.runtime.models import RunInput, RunResult
from armature_temporal.service.client import prepare_inputs, run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from tests.fakes import SPECS
from worker import build_worker

#: How each example ends when nobody is there: a verification run makes only fully reversible
#: tool calls, so safe-shell's first shell command is refused and the rest never run; it never
#: approves a gate, so customer-triage completes without its approval.
EXPECTED = {
    "customer-triage.yaml": ("completed", {"approve_reply": "verification_gate"}),
    "safe-shell.yaml": (
        "failed",
        {
            "inspect": "policy_blocked",
            "record": "dependency_failed",
            "archive": "dependency_failed",
            "summarize": "dependency_failed",
        },
    ),
}
#: Inputs for specs with required ones (researcher.yaml is research-fanout's subagent).
INPUTS = {"researcher.yaml": {"partition": ["Why do tides happen?"], "index": 0, "count": 1}}


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "passthrough"])
@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
async def test_example_spec_runs_to_its_end(
    client: Client, task_queue: str, path: Path, strict: bool
) -> None:
    loaded = load_spec(path)
    plan = compile_spec(loaded)
    knowledge = loaded.spec.knowledge
    if knowledge is not None and plan.knowledge_collection is not None:
        # what armature submit does first: index the spec's documents (those that changed)
        report = index_spec_knowledge(
            TraceStore(),
            path,
            plan.knowledge_collection,
            list(knowledge.sources),
            embedder=spec_embedder(knowledge.embedder),
        )
        assert not report.unreadable, report.unreadable
    async with build_worker(client, task_queue, strict_sandbox=strict):
        handle = await client.start_workflow(
            "RunSpec",
            RunInput(
                plan=plan, inputs=prepare_inputs(plan, INPUTS.get(path.name, {})), verification=True
            ),
            id=f"example-{path.stem}",
            task_queue=task_queue,
            result_type=RunResult,
        )
        result = await run_outcome(handle)
    assert result is not None
    state, errors = EXPECTED.get(path.name, ("completed", {}))
    assert result.state == state, (result.reason, {k: v.error for k, v in result.stages.items()})
    assert {k: v.error_type for k, v in result.stages.items() if v.error_type} == errors
