"""The improvement loop, one round: diagnose a spec from its traces, propose single changes on
its editable surfaces, verify each by running it and the current spec on the same recent
inputs (child runs of the interpreter, in verification mode), and keep the proposals.

Run on demand (``armature improve SPEC``) or by the Temporal Schedule that ``armature schedule
SPEC`` creates from ``self_improvement.schedule``. At the end, ``improve_settle`` writes the best
verified auto-lane change into the spec file when ``self_improvement.auto_apply`` is true, and
the best verified review-lane change to ``<spec>.pending.yaml`` (never over the spec); other
verified changes stay proposals for ``armature proposals apply``.

When two or more verified changes do not conflict, a second wave runs them combined on the
same inputs (``improve_combine``, ``improve_record_combined``; see improve/combine.py): the
combination is settled instead of the singles when it verifies against the baseline and is
not worse than the best single.

Every round ends by counting its effort (``improve_effort``; see improve/effort.py): the
proposals it tried, the verification runs and tokens it spent, why it stopped, that it has no
held-out set, and whether its refiner shares a judge's tier.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from armature_temporal.improve.cases import CaseSet, GradeCasesInput, GradedCases
    from armature_temporal.improve.combine import (
        CombineInput,
        CombineRecordInput,
        Combining,
    )
    from armature_temporal.improve.models import (
        EffortInput,
        ImproveInput,
        ImproveResult,
        Prepared,
        Proposal,
        RecordInput,
        RoundEffort,
        SearchReport,
        Settled,
        SettleInput,
    )
    from armature_temporal.spec.compiler import Plan

from workflows.improve_search import frontier_search
from workflows.paired import paired_run

__all__ = ["IMPROVE_WORKFLOW", "ImproveWorkflow"]

IMPROVE_WORKFLOW = "Improve"
#: workflow.patched id: a round ends by settling its verified proposals (auto lane / pending).
LANES_PATCH = "improve-review-lanes"
#: workflow.patched id: a second wave verifies the round's verified changes combined.
COMBINE_PATCH = "improve-combine"
#: workflow.patched id: a round ends by counting its effort (runs, tokens) from the store.
EFFORT_PATCH = "improve-effort"
#: workflow.patched id: every version also runs the spec's cases (self_improvement.cases).
CASES_PATCH = "improve-cases"
STORE_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=2))


@workflow.defn(name=IMPROVE_WORKFLOW)
class ImproveWorkflow:
    """One improvement round. Its ``progress`` query says which phase it is in."""

    def __init__(self) -> None:
        self.phase = "diagnosing"
        self.runs_done = 0
        self.runs_total = 0

    @workflow.query(name="progress")
    def progress(self) -> dict[str, object]:
        return {"phase": self.phase, "runs_done": self.runs_done, "runs_total": self.runs_total}

    async def _verify(self, label: str, plan: Plan, index: int, inputs: dict[str, object]) -> str:
        """One verification run; its id."""
        run_id = await paired_run(
            label,
            plan,
            index,
            inputs,
            summary=f"verification run {index + 1} of {label}: {plan.name}",
        )
        self.runs_done += 1
        return run_id

    async def _cases(self, label: str, plan: Plan, cases: CaseSet) -> GradedCases:
        """Version ``label`` on every case × repeat (repeat r with replicate r, so every
        version draws the same noise for it), graded as ``armature eval`` grades."""
        self.runs_total += cases.runs
        flat = await asyncio.gather(
            *(
                self._verify(f"{label}/case-{c}", plan, r, inputs)
                for c, inputs in enumerate(cases.inputs)
                for r in range(cases.repeat)
            )
        )
        ids = [
            list(flat[c * cases.repeat : (c + 1) * cases.repeat]) for c in range(len(cases.inputs))
        ]
        graded: GradedCases = await workflow.execute_activity(
            "improve_grade_cases",
            GradeCasesInput(plan=plan, cases=cases, run_ids=ids),
            result_type=GradedCases,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=STORE_RETRY,
            summary=f"grade {label}'s runs of the spec's cases",
        )
        return graded

    async def _combine(
        self,
        inp: ImproveInput,
        prepared: Prepared,
        proposals: list[Proposal],
        ids: list[str],
        base_cases: list[list[bool | None]] | None = None,
    ) -> Proposal | None:
        """The second wave: the verified changes combined, run on the same inputs (pair i
        again replicate i) and decided against the baseline's and the best single's runs."""
        self.phase = "combining"
        found: Combining = await workflow.execute_activity(
            "improve_combine",
            CombineInput(spec_text=inp.spec_text, spec_path=inp.spec_path, proposals=proposals),
            result_type=Combining,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=STORE_RETRY,
            summary="combine the verified, non-conflicting changes into one candidate",
        )
        combo = found.combination
        if combo is None:
            workflow.logger.info("no combination: %s", found.detail)
            return None
        n = len(prepared.inputs)
        self.phase = "verifying the combination"
        self.runs_total += n
        combined_runs = await asyncio.gather(
            *(self._verify("combined", combo.plan, i, x) for i, x in enumerate(prepared.inputs))
        )
        case_verdicts: list[list[list[bool | None]]] = []
        if base_cases is not None and prepared.cases is not None:
            graded = await self._cases("combined", combo.plan, prepared.cases)
            case_verdicts = [base_cases, graded.verdicts]
        k = [p.id for p in proposals].index(combo.best)
        by_id = {p.id: p for p in proposals}
        self.phase = "recording"
        proposal: Proposal = await workflow.execute_activity(
            "improve_record_combined",
            CombineRecordInput(
                improve_run_id=workflow.info().workflow_id,
                created_at=workflow.now().isoformat(),
                spec_text=inp.spec_text,
                spec_path=inp.spec_path,
                prepared=prepared,
                m=len(proposals),
                members=[by_id[pid] for pid in combo.members],
                combination=combo,
                baseline_runs=ids[:n],
                best_runs=ids[(k + 1) * n : (k + 2) * n],
                combined_runs=list(combined_runs),
                case_verdicts=case_verdicts,
            ),
            result_type=Proposal,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=STORE_RETRY,
            summary="score the combination against the baseline and the best single",
        )
        return proposal

    @workflow.run
    async def run(self, inp: ImproveInput) -> ImproveResult:
        prepared: Prepared = await workflow.execute_activity(
            "improve_prepare",
            inp,
            result_type=Prepared,
            start_to_close_timeout=timedelta(minutes=5),
            retry_policy=STORE_RETRY,
            summary="diagnose the spec from its traces; propose changes",
        )
        if prepared.stop is not None:
            return prepared.stop
        assert prepared.plan is not None and prepared.diagnosis is not None
        self.phase = "verifying"
        versions = [("baseline", prepared.plan)] + [
            (f"candidate-{k + 1}", c.plan) for k, c in enumerate(prepared.candidates)
        ]
        case_verdicts: list[list[list[bool | None]]] = []
        search: SearchReport | None = None
        if prepared.cases is not None and workflow.patched(CASES_PATCH):
            self.phase = "running the spec's cases"
            cases = prepared.cases
            graded = list(
                await asyncio.gather(*(self._cases(label, plan, cases) for label, plan in versions))
            )
            si = prepared.plan.self_improvement
            if si is not None and si.search_runs > 0 and (inp.refiner == "only" or si.refiner_tier):
                self.phase = "searching the frontier"
                found, found_graded, search = await frontier_search(
                    inp, prepared, graded, self._cases
                )
                k0 = len(prepared.candidates)
                prepared = prepared.model_copy(
                    update={"candidates": [*prepared.candidates, *found]}
                )
                versions += [(f"candidate-{k0 + j + 1}", c.plan) for j, c in enumerate(found)]
                graded += found_graded
            case_verdicts = [g.verdicts for g in graded]
            self.phase = "verifying"
        self.runs_total += len(versions) * len(prepared.inputs)
        ids = await asyncio.gather(
            *(
                self._verify(label, plan, i, inputs)
                for label, plan in versions
                for i, inputs in enumerate(prepared.inputs)
            )
        )
        n = len(prepared.inputs)
        self.phase = "recording"
        proposals: list[Proposal] = await workflow.execute_activity(
            "improve_record",
            RecordInput(
                improve_run_id=workflow.info().workflow_id,
                created_at=workflow.now().isoformat(),
                spec_text=inp.spec_text,
                prepared=prepared,
                spec_path=inp.spec_path,
                baseline_runs=list(ids[:n]),
                candidate_runs=[
                    list(ids[(k + 1) * n : (k + 2) * n]) for k in range(len(versions) - 1)
                ],
                case_verdicts=case_verdicts,
            ),
            result_type=list[Proposal],
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=STORE_RETRY,
            summary="score the verification runs; keep the proposals",
        )
        verified = [p for p in proposals if p.verdict == "verified"]
        to_settle = verified
        combined: Proposal | None = None
        if len(verified) >= 2 and workflow.patched(COMBINE_PATCH):
            combined = await self._combine(
                inp, prepared, proposals, list(ids), case_verdicts[0] if case_verdicts else None
            )
            if combined is not None:
                if combined.verdict == "verified":
                    to_settle = [combined]
                    verified = [*verified, combined]
                proposals = [*proposals, combined]
        settled: Settled | None = None
        if verified and workflow.patched(LANES_PATCH):
            self.phase = "settling"
            settled = await workflow.execute_activity(
                "improve_settle",
                SettleInput(spec_path=inp.spec_path, spec_text=inp.spec_text, proposals=to_settle),
                result_type=Settled,
                start_to_close_timeout=timedelta(minutes=2),
                retry_policy=STORE_RETRY,
                summary="auto lane: apply under auto_apply; review lane: write <spec>.pending.yaml",
            )
        effort: RoundEffort | None = None
        if prepared.effort is not None and workflow.patched(EFFORT_PATCH):
            effort = await workflow.execute_activity(
                "improve_effort",
                EffortInput(
                    round_id=workflow.info().workflow_id,
                    effort=prepared.effort,
                    proposals_tried=len(proposals),
                ),
                result_type=RoundEffort,
                start_to_close_timeout=timedelta(minutes=2),
                retry_policy=STORE_RETRY,
                summary="count the runs and tokens the round spent; keep its effort report",
            )
        self.phase = "done"
        if verified:
            detail = (
                f"{len(verified)} of {len(proposals)} candidate changes verified on {n} paired "
                "runs; review with `armature proposals show <id>`"
            )
            if combined is not None:
                detail += f"; the combination {combined.id} " + (
                    "verified and was settled instead of the singles"
                    if to_settle == [combined]
                    else "did not verify, so the singles were settled"
                )
        else:
            detail = f"none of {len(proposals)} candidate changes did better on {n} paired runs"
        if search is not None:
            detail += (
                f"; the frontier search spent {search.spent_runs} of {search.budget_runs} case "
                f"runs on {search.tried} candidate(s) and stopped: {search.stop_reason}"
            )
        return ImproveResult(
            status="proposed" if verified else "nothing_better",
            detail=detail,
            diagnosis=prepared.diagnosis,
            proposals=proposals,
            # Only the result's value: no command changes, so no patch is needed.
            verification=prepared.verification,
            settled=settled,
            notes=prepared.notes,
            effort=effort,
            search=search,
        )
