"""Run a cases file against a spec (or two, ``--compare``) through Temporal, and grade.

Each case × repeat is one run of the spec's interpreter workflow, started like ``armature
submit`` starts one, with the case's ``vars`` as its inputs and the repeat number as its
``replicate`` (so under ``simulate`` each repeat draws its own noise, and with ``--compare`` the
two specs draw the *same* noise for a case × repeat: same inputs, same replicate).

Eval runs are **verification runs** (:class:`~armature_temporal.runtime.models.RunInput`
``verification=True``): a cases file is replayed many times, by people and CI, so its runs
must never act on the world — no gate is approved (a gated stage and everything after it is
held, and the run completes with the stages before it), only fully reversible tool calls run,
no bandit is rewarded — and they stay out of the dashboards, diagnoses and exports that the
learning loops read, which must see production traffic, not test cases.

What assertions see (:func:`subject`): the output of the stage an assertion or its case names,
else the run's *answer*: the output of the last stage, in the plan's order, that completed with
an output, judges, gates and post-run stages aside.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from armature_temporal.evals.assertions import GradeContext, Verdict, grade, subject_text
from armature_temporal.evals.cases import CasesError, CasesFile
from armature_temporal.evals.models import CaseResult, CaseRun, EvalResult

if TYPE_CHECKING:
    from temporalio.client import Client

    from armature_temporal.runtime.models import StageResult
    from armature_temporal.spec.compiler import Plan

__all__ = ["answer_stage", "check_cases", "grade_recorded", "run_eval"]

Progress = Callable[[int, int, int], None]


def check_cases(cases: CasesFile, plan: Plan) -> list[dict[str, Any]]:
    """Each case's run inputs for ``plan`` (defaults filled in), after checking everything the
    spec decides: vars against its inputs, stage names, judge tiers.

    Raises:
        CasesError: naming the case (file:line), the field, the value and the spec's choices.
    """
    from armature_temporal.errors import did_you_mean
    from armature_temporal.evals.judge import judge_tier
    from armature_temporal.service.client import InputError, prepare_inputs

    stages = [s.id for s in plan.stages]
    prepared = []
    for case in cases.cases:
        try:
            prepared.append(
                prepare_inputs(plan, case.vars, how=f"fix `vars:` of the case at {case.where}")
            )
        except InputError as exc:
            raise CasesError(f"{case.where}: tests[{case.index}].vars: {exc}") from None
        for name in [case.stage, *(a.stage for a in case.asserts)]:
            if name is not None and name not in stages:
                raise CasesError(
                    f"{case.where}: tests[{case.index}]: stage {name!r} is not a stage of spec "
                    f"{plan.name!r}{did_you_mean(name, stages)}; its stages: {stages}"
                )
        for a in case.asserts:
            if a.type.removeprefix("not-") == "llm-rubric":
                try:
                    judge_tier(plan, a.provider)
                except KeyError as exc:
                    raise CasesError(f"{case.where}: tests[{case.index}]: {exc.args[0]}") from None
    return prepared


def answer_stage(plan: Plan, stages: dict[str, StageResult]) -> str | None:
    """The stage whose output is the run's answer: the last in plan order that completed with
    an output, judges, gates and post-run stages aside (None: no stage did)."""
    answer = None
    for stage in plan.stages:
        result = stages.get(stage.id)
        if (
            stage.kind == "gate"
            or stage.post_run
            or (stage.role is not None and stage.role.type == "judge")
            or result is None
            or result.status != "completed"
            or result.output is None
        ):
            continue
        answer = stage.id
    return answer


async def _run_once(
    client: Client, plan: Plan, inputs: dict[str, Any], replicate: int, queue: str
) -> tuple[str, str, str, dict[str, StageResult]]:
    """Start one verification run and wait for it: (run id, state, reason, stages)."""
    from temporalio.client import WorkflowFailureError

    from armature_temporal.service.client import start_run

    run_id = f"{plan.name}-eval-{uuid.uuid4().hex[:8]}"
    handle = await start_run(
        client,
        plan,
        inputs,
        task_queue=queue,
        run_id=run_id,
        replicate=replicate,
        verification=True,
    )
    try:
        result = await handle.result()
    except WorkflowFailureError as exc:
        cause: BaseException | None = exc.cause
        while cause is not None and cause.__cause__ is not None:
            cause = cause.__cause__
        return run_id, "failed", getattr(cause, "message", None) or str(cause), {}
    return run_id, result.state, result.reason or "", dict(result.stages)


class _Grader:
    """Grades one spec's runs: finds each assertion's subject and the judge's inputs."""

    def __init__(self, plan: Plan, base_dir: Path, store: Any) -> None:
        self.plan = plan
        self.base_dir = base_dir
        self.store = store

    async def case_run(
        self, case: Any, repeat: int, inputs: dict[str, Any], client: Client, queue: str
    ) -> CaseRun:
        run_id, state, reason, stages = await _run_once(client, self.plan, inputs, repeat, queue)
        return await self.graded(case, repeat, inputs, run_id, state, reason, stages)

    async def graded(
        self,
        case: Any,
        repeat: int,
        inputs: dict[str, Any],
        run_id: str,
        state: str,
        reason: str,
        stages: dict[str, Any],
    ) -> CaseRun:
        """Grade one finished run of ``case`` (``stages``: each stage's result, with
        ``status``, ``output`` and ``error``)."""
        if state != "completed":
            return CaseRun(
                case=case.index,
                repeat=repeat,
                run_id=run_id,
                state=state,
                status="fail",
                reason=f"the run ended {state}: {reason}" if reason else f"the run ended {state}",
            )
        outputs = {k: v.output for k, v in stages.items() if v.status == "completed"}
        qualities = await self._qualities(run_id, case)
        verdicts = []
        for index, a in enumerate(case.asserts):
            stage = a.stage or case.stage or answer_stage(self.plan, stages)
            result = stages.get(stage) if stage else None
            if stage is None or result is None or result.status != "completed":
                why = (
                    "no stage completed with an output"
                    if stage is None
                    else f"stage {stage!r} has no output "
                    f"({result.status if result else 'not run'}"
                    f"{': ' + result.error if result and result.error else ''})"
                )
                verdicts.append(Verdict(type=a.type, status="fail", reason=why, stage=stage))
                continue
            ctx = GradeContext(
                text=subject_text(result.output),
                output=result.output,
                stage=stage,
                outputs=outputs,
                vars=dict(inputs),
                run_id=run_id,
                base_dir=self.base_dir,
                description=case.description,
                judge=self._judge(inputs, repeat, qualities),
                index=index,
                extra={"provider": a.provider},
            )
            verdicts.append(await grade(a.type, a.value, a.threshold, ctx))
        status = "pass"
        first = ""
        for v in verdicts:
            if v.status == "error":
                status, first = "error", f"{v.type}: {v.reason}"
                break
            if v.status == "fail" and status == "pass":
                status, first = "fail", f"{v.type}: {v.reason}"
        return CaseRun(
            case=case.index,
            repeat=repeat,
            run_id=run_id,
            state=state,
            status=status,  # type: ignore[arg-type]
            reason=first,
            verdicts=verdicts,
        )

    async def _qualities(self, run_id: str, case: Any) -> dict[str, float]:
        """Each stage's latent quality as the trace store recorded it (simulate judges read
        it); read only when the case has an llm-rubric."""
        if self.store is None or not any(
            a.type.removeprefix("not-") == "llm-rubric" for a in case.asserts
        ):
            return {}
        records = await asyncio.to_thread(self.store.records, run_id)
        found: dict[str, float] = {}
        for r in records:  # in order: the final attempt's quality wins
            quality = r.data.get("simulated_quality") if r.kind == "attempt" else None
            if r.stage_id and quality is not None and r.output_valid:
                found[r.stage_id] = float(quality)
        return found

    def _judge(self, inputs: dict[str, Any], repeat: int, qualities: dict[str, float]) -> Any:
        from armature_temporal.evals.judge import judge_tier, rubric_score, sim_seed

        seed = sim_seed(inputs, repeat)

        async def judge(
            rubric: str, text: str, stage: str | None, provider: str | None, index: int
        ) -> tuple[float, str]:
            tier = judge_tier(self.plan, provider)
            from armature_temporal.evals.assertions import GraderError

            try:
                return await rubric_score(
                    tier,
                    rubric,
                    text,
                    seed=f"{seed}/eval/{stage}/{index}/{tier.name}",
                    judged_quality=qualities.get(stage or ""),
                )
            except RuntimeError as exc:
                raise GraderError(str(exc)) from None

        return judge


async def run_eval(
    plans: list[Plan],
    cases: CasesFile,
    *,
    repeat: int,
    client: Client,
    task_queue: str,
    concurrency: int = 4,
    store: Any = None,
    progress: Progress | None = None,
) -> list[EvalResult]:
    """Every case ``repeat`` times on each plan (one for an eval, two for ``--compare``: the
    same inputs and replicate for both), at most ``concurrency`` runs at a time. ``store``
    (a TraceStore) is where simulate judges read latent qualities; ``progress(done, total,
    not_passed)`` is called after each run.

    Raises:
        CasesError: a case the spec cannot run (see :func:`check_cases`).
    """
    inputs = [check_cases(cases, plan) for plan in plans]
    base_dir = Path(cases.path).resolve().parent
    graders = [_Grader(plan, base_dir, store) for plan in plans]
    limit = asyncio.Semaphore(concurrency)
    total = len(plans) * len(cases.cases) * repeat
    done = [0, 0]

    async def one(p: int, case: Any, r: int) -> CaseRun:
        async with limit:
            run = await graders[p].case_run(case, r, inputs[p][case.index], client, task_queue)
        done[0] += 1
        done[1] += run.status != "pass"
        if progress is not None:
            progress(done[0], total, done[1])
        return run

    jobs = {
        (p, c.index, r): asyncio.ensure_future(one(p, c, r))
        for c in cases.cases
        for r in range(repeat)
        for p in range(len(plans))
    }
    try:
        await asyncio.gather(*jobs.values())
    finally:
        for job in jobs.values():
            job.cancel()
    created = datetime.now(UTC).isoformat()
    results = []
    for p, plan in enumerate(plans):
        rows = [
            CaseResult(
                index=c.index,
                description=c.description,
                where=c.where,
                runs=[jobs[(p, c.index, r)].result() for r in range(repeat)],
            )
            for c in cases.cases
        ]
        results.append(
            EvalResult(
                id=f"eval-{plan.name}-{uuid.uuid4().hex[:8]}",
                spec_name=plan.name,
                spec_version=str(plan.version),
                spec_hash=plan.spec_hash,
                cases_file=cases.path,
                repeat=repeat,
                created_at=created,
                cases=rows,
            )
        )
    return results


class _Recorded(BaseModel):
    """A stage's result as its trace record keeps it (what grading reads of a StageResult)."""

    status: str
    output: Any = None
    error: str | None = None


async def grade_recorded(
    plan: Plan,
    case: Any,
    repeat: int,
    inputs: dict[str, Any],
    run_id: str,
    store: Any,
    base_dir: Path,
) -> CaseRun:
    """Grade a run that someone else started (the improvement loop's case runs, children of
    its workflow) from its records in ``store``: each stage's last record, and the run's end.
    A run without a ``run_end`` record did not finish: it fails the case."""
    records = await asyncio.to_thread(store.records, run_id)
    stages: dict[str, Any] = {}
    state, reason = "unfinished", "no run_end record: the run did not finish"
    for r in records:
        if r.kind == "stage" and r.stage_id is not None:
            stages[r.stage_id] = _Recorded(status=r.status or "", output=r.output, error=r.error)
        elif r.kind == "run_end":
            state = "completed" if r.status in (None, "completed") else str(r.status)
            reason = r.error or ""
    return await _Grader(plan, base_dir, store).graded(
        case, repeat, inputs, run_id, state, reason, stages
    )
