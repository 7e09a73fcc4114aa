"""``Gates``: durable waits for a person's decision — stage gates and mid-stage approvals
(a tool call or a hook that asks for one).

A verification run (an improvement round's, memory CI's, a fine-tune pair's) never approves a
gate: it has nobody to ask, and it replays inputs people gave real runs. A stage gate holds its
stage (:meth:`Gates.hold`) and everything after it (:meth:`Gates.hold_after`), each marked
skipped with error type ``verification_gate``; the run completes with the stages before the
gate, which is what the paired comparison scores. A tool, hook or adapter approval is refused at
once, with the reason the model sees.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.errors import did_you_mean
from armature_temporal.runtime.models import (
    UNAUTHENTICATED,
    GateDecision,
    GateInfo,
    GateProofCheck,
    GateProofResult,
    ToolApproval,
)
from armature_temporal.runtime.search_attributes import WAITING_GATE
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.templating import render
from workflows.interpreter.failures import StageFailure
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["VERIFICATION_NEVER_APPROVES", "Gates"]

#: workflow.patched id: a verification run approves no gate (before it, stage gates approved
#: themselves there). Runs started before it replay as they ran.
VERIFICATION_NEVER_APPROVES = "verification-never-approves"
#: Who refused an approval in a verification run (the decision's ``by``).
VERIFICATION_BY = "verification run"


class Gates:
    """Which gates wait, what they ask, and the wait itself. Decisions arrive through the
    workflow's ``resolve_gate`` update or ``gate`` signal (:meth:`receive`) into
    ``RunContext.decisions``."""

    def __init__(self, run: RunContext, tracer: Tracer) -> None:
        self.run = run
        self.tracer = tracer

    def problem(self, gate_id: str) -> str | None:
        """Why a decision for ``gate_id`` cannot be taken now, or None if it can."""
        run = self.run
        if gate_id in run.pending and gate_id not in run.decisions:
            return None
        waiting = [g for g in run.pending if g not in run.decisions]
        if gate_id not in run.results and "#" not in gate_id:
            return (
                f"unknown stage {gate_id!r} in run {run.run_id}; "
                f"stages: {list(run.results)}; waiting gates: {waiting or 'none'}"
                f"{did_you_mean(gate_id, waiting or list(run.results))}"
            )
        status = run.results[gate_id].status if gate_id in run.results else "not waiting"
        return (
            f"stage {gate_id!r} is not waiting for approval (status: {status}); "
            f"waiting gates: {waiting or 'none'}"
        )

    def receive(self, decision: GateDecision) -> None:
        """Take a decision that arrived by update or signal (its gate waits: the caller
        checked :meth:`problem`). Temporal does not say who sent it, so its ``by`` is only a
        claim: kept as ``claimed_by``, with ``by`` the unauthenticated ``signal`` until
        :meth:`wait` has the worker check the proof it carries."""
        self.run.decisions[decision.stage] = decision.model_copy(
            update={"by": UNAUTHENTICATED, "claimed_by": decision.by, "unverified": None}
        )

    @staticmethod
    def message(stage: PlanStage, variables: dict[str, Any], output: Any) -> str:
        """The stage gate's question, rendered with the stage's variables and output."""
        assert stage.gate is not None
        if stage.gate.message is None:
            return f"approve stage {stage.id!r}?"
        try:
            return render(stage.gate.message, {**variables, "output": output})
        except Exception as exc:  # jinja raises many types; show the template, say why
            return f"{stage.gate.message} (could not render: {exc})"

    async def wait(
        self,
        gate_id: str,
        message: str,
        timeout_s: float | None,
        on_timeout: str,
        *,
        unattended: Literal["approve", "reject"] = "reject",
        tool_call: ToolApproval | None = None,
    ) -> GateDecision:
        """Wait durably for a person's decision on ``gate_id``. In a verification run nobody
        is asked and nothing is approved: the decision is a refusal, at once (``unattended``
        is what runs started before that rule decided, kept so they replay). ``tool_call``
        is the exact call a tool approval asks about (shown by the status query)."""
        run = self.run
        if run.verification:
            if self.never_approves():
                return self._not_approved(gate_id)
            # A run started before that rule replays as it ran: the gate took ``unattended``.
            run.decisions[gate_id] = GateDecision(
                stage=gate_id,
                decision=unattended,
                comment=f"decided automatically ({unattended}): a verification run",
                by="armature improve",
            )
        if gate_id in run.results:
            run.results[gate_id].status = "waiting_gate"
        await self.tracer.flush()  # a waiting run's trace so far is visible in the store
        run.pending[gate_id] = GateInfo(
            stage=gate_id,
            message=message,
            since=workflow.now().isoformat(),
            timeout_s=timeout_s,
            on_timeout=on_timeout,
            tool_call=tool_call,
        )
        run.events.gate_waiting(run.pending[gate_id])
        self._mark_waiting()
        evicted = False
        try:
            await workflow.wait_condition(
                lambda: gate_id in run.decisions,
                timeout=timedelta(seconds=timeout_s) if timeout_s else None,
                timeout_summary=(
                    f"waiting for approval at {gate_id}: if nobody decides within "
                    f"{_duration(timeout_s or 0)}, on_timeout {on_timeout}"
                ),
            )
            if run.decisions[gate_id].proof is not None:
                await self._authenticate(gate_id)
        except TimeoutError:
            if on_timeout == "fail":
                raise StageFailure(
                    "timeout",
                    f"gate {gate_id!r}: nobody decided within {timeout_s:g}s (on_timeout: fail)",
                ) from None
            run.decisions[gate_id] = GateDecision(
                stage=gate_id,
                decision=on_timeout,  # type: ignore[arg-type]
                comment=f"timed out after {timeout_s:g}s",
                by="timeout",
            )
        except GeneratorExit:
            # Evicted from the worker's cache: the run continues elsewhere from its history,
            # and no workflow API may be called here.
            evicted = True
            raise
        finally:
            if not evicted:
                self._after(gate_id)
        return run.decisions[gate_id]

    async def _authenticate(self, gate_id: str) -> None:
        """Record who decided ``gate_id`` as its decision's proof vouches, checked by the
        worker (the ``verify_gate_decision`` local activity: workflow code holds no key);
        ``by`` stays ``signal`` when it does not check, with why in ``unverified``.

        Only decisions sent with a proof get here, and only this version's clients send one,
        so histories from before it replay without the activity."""
        run = self.run
        sent = run.decisions[gate_id]
        try:
            checked = await workflow.execute_local_activity(
                "verify_gate_decision",
                GateProofCheck(
                    run_id=run.run_id, decision=sent, waiting_since=run.pending[gate_id].since
                ),
                result_type=GateProofResult,
                start_to_close_timeout=timedelta(seconds=10),
                retry_policy=RetryPolicy(maximum_attempts=3),
                summary=f"who decided {gate_id}: check the decision's proof",
            )
        except (ActivityError, ApplicationError) as exc:  # local activities raise the latter
            checked = GateProofResult(problem=f"the proof could not be checked: {exc.cause or exc}")
        if checked.by is not None:
            update: dict[str, Any] = {"by": checked.by, "claimed_by": None, "proof": None}
        else:
            workflow.logger.warning(
                "gate %s: decision recorded as by %r: %s", gate_id, UNAUTHENTICATED, checked.problem
            )
            update = {"by": UNAUTHENTICATED, "proof": None, "unverified": checked.problem}
        run.decisions[gate_id] = sent.model_copy(update=update)

    def never_approves(self) -> bool:
        """Whether this run holds every gate unapproved: a verification run (one started
        before :data:`VERIFICATION_NEVER_APPROVES` replays as it ran)."""
        return self.run.verification and workflow.patched(VERIFICATION_NEVER_APPROVES)

    def _not_approved(self, gate_id: str) -> GateDecision:
        """A verification run's answer to an approval: refused, traced, nobody asked."""
        decided = GateDecision(
            stage=gate_id,
            decision="reject",
            comment="not approved: a verification run never approves a gate, so the call it "
            "asks about was not made (in a real run a person decides)",
            by=VERIFICATION_BY,
        )
        self.run.decisions[gate_id] = decided
        self.tracer.gate(gate_id, decided)
        self.run.events.gate_decided(decided)
        return decided

    def hold(self, stage: PlanStage, output: Any) -> None:
        """A verification run reached ``stage``'s gate: it is never approved. The stage is
        skipped (``verification_gate``) with what it produced before the gate, which is not
        passed on; :meth:`hold_after` holds the stages after it."""
        result = self.run.results[stage.id]
        result.status, result.error_type = "skipped", "verification_gate"
        result.error = (
            f"gate {stage.id!r} not approved: a verification run never approves a gate, so "
            "this stage's output goes no further and the stages after it are not executed "
            "(in a real run a person decides)"
        )
        result.output = output
        self.run.held[stage.id] = stage.id

    def hold_after(self, stages: list[PlanStage]) -> None:
        """Mark every pending stage that depends, directly or not, on a held gate as not
        executed (skipped, ``verification_gate``) and trace it, so a comparison can leave it
        out on both sides (``data.verification_gate`` names the gate). No-op outside
        verification runs: nothing is held there."""
        run = self.run
        changed = bool(run.held)
        while changed:
            changed = False
            for stage in stages:
                result = run.results[stage.id]
                behind = [run.held[d] for d in stage.depends_on if d in run.held]
                if result.status != "pending" or not behind:
                    continue
                result.status, result.error_type = "skipped", "verification_gate"
                result.error = (
                    f"not executed in a verification run: it comes after gate {behind[0]!r}, "
                    "which a verification run never approves"
                )
                run.held[stage.id] = behind[0]
                self.tracer.stage(stage)
                run.events.stage_complete(stage.id, result)
                changed = True

    def _after(self, gate_id: str) -> None:
        """A gate stopped waiting: trace its decision, clear it from the status."""
        run = self.run
        waited = run.pending.pop(gate_id, None)
        decided = run.decisions.get(gate_id)
        if decided is not None:
            self.tracer.gate(gate_id, decided, waited.since if waited is not None else None)
            run.events.gate_decided(decided)
        if gate_id in run.results and run.results[gate_id].status == "waiting_gate":
            run.results[gate_id].status = "running"
        self._mark_waiting()

    def _mark_waiting(self) -> None:
        waiting = bool(self.run.pending)
        self.run.state = "waiting_gate" if waiting else "running"
        workflow.upsert_search_attributes([WAITING_GATE.value_set(waiting)])
        # What the Web UI's run page shows as the run's current details (no history event).
        workflow.set_current_details(self.details())

    def details(self) -> str:
        """One line per waiting gate: what it asks and the command that answers it."""
        run_id = self.run.run_id
        # Temporal markdown: the commands as code, so "--reason" is not typeset as a dash.
        return "\n\n".join(
            f"waiting for approval at {gate_id}: {info.message or '(no message)'} — "
            f"`armature approve {run_id} {gate_id}` (or `armature reject {run_id} {gate_id} "
            "--reason ...`)"
            for gate_id, info in self.run.pending.items()
        )


def _duration(seconds: float) -> str:
    """``172800`` → ``2d``, ``5400`` → ``90m``: a gate's timeout as a spec would write it."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
