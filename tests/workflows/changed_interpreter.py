"""A deliberately incompatible interpreter, to show the replay test can fail."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from armature_temporal.runtime.models import RunInput, RunResult


@workflow.defn(name="RunSpec")
class ChangedInterpreter:
    """Sleeps before running any stage: a different first command than the real one."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        await workflow.sleep(1)
        raise RuntimeError("unreachable in replay")
