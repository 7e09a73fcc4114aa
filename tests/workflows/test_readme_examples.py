"""Every spec the README shows that runs offline (all its tiers on the simulate provider) runs
clean as written: five runs each, on distinct inputs, all complete (issue 26: the cache example
failed 2 runs of 5 on the default simulate tier's think-only replies)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import Plan
from armature_temporal.spec.loader import load_spec_text
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

README = Path(__file__).resolve().parents[2] / "README.md"
#: The inputs each example runs with. The simulator draws validity from the inputs, so these
#: are fixed: 13 drew a think-only reply for support-faq on the default small tier, 19, 23 and
#: 36 for lessons-demo (found by running 40 inputs of each) — an example without a retry
#: fails on them, as the README's did for a user.
RUN_NUMBERS = (13, 19, 23, 36, 1)


def _offline_examples() -> list[tuple[str, str]]:
    """(name, text) of each yaml block of the README whose every tier is simulated."""
    found = []
    for block in re.findall(r"```yaml\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        if block.startswith("# specs/evals/"):
            continue  # an `armature eval` cases file (tests/unit/test_readme.py checks them)
        spec = load_spec_text(block, "README.md").spec
        if spec.mcp_servers:
            continue  # it needs its MCP servers (tests/workflows/test_mcp_tools.py runs some)
        if spec.knowledge is not None:
            continue  # it needs its documents (specs/knowledge-qa.yaml runs in test_examples)
        plan = plan_from(block)
        if all(t.provider == "simulate" for t in plan.tiers.values()):
            found.append((plan.name, block))
    return found


EXAMPLES = _offline_examples()


def _inputs(plan: Plan, i: int) -> dict[str, str]:
    """A value for every run input the example reads: declared ones, and (a spec that declares
    none) the names its templates read that no stage produces."""
    from armature_temporal.spec.templating import referenced_names

    declared = plan.inputs_schema.get("properties") or {}
    if declared:
        return {name: f"value {i} of {name}" for name in declared}
    stages = {s.id for s in plan.stages}
    names: set[str] = set()
    for stage in plan.stages:
        if stage.role is not None:
            names |= set(referenced_names(stage.role.prompt))
    names -= stages | {"inputs"}
    if any(s.role is not None and "inputs" in referenced_names(s.role.prompt) for s in plan.stages):
        for stage in plan.stages:
            if stage.role is not None:
                names |= referenced_names(stage.role.prompt).get("inputs", set())
    return {name: f"question {i}: what about tide pools number {i}?" for name in sorted(names)}


def test_the_readme_shows_offline_examples() -> None:
    assert {"support-faq", "lessons-demo", "invoices", "answers"} <= {n for n, _ in EXAMPLES}


@pytest.mark.parametrize(("name", "text"), EXAMPLES, ids=[n for n, _ in EXAMPLES])
async def test_a_readme_example_runs_clean_as_written(
    client: Client, task_queue: str, name: str, text: str
) -> None:
    plan = plan_from(text)
    results: list[RunResult] = []
    async with build_worker(client, task_queue):
        for i in RUN_NUMBERS:
            handle = await start(client, plan, task_queue, _inputs(plan, i))
            result = await run_outcome(handle)
            assert result is not None
            results.append(result)
    failed = [(r.run_id, r.state, r.reason) for r in results if r.state != "completed"]
    assert not failed, f"{name}: {len(failed)} of {len(results)} runs did not complete: {failed}"
