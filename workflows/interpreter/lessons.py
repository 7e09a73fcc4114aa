"""``LessonMemory``: the heuristics memory in a run (``experience:``).

Each execution of an LLM stage loads its lessons once (:meth:`LessonMemory.load`, a local
activity): the prompt compiler's choice among the stage's promoted heuristics, or the ids the
run was given (``RunInput.lessons``: memory CI replays with and without a lesson) that may enter
a prompt (:func:`~armature_temporal.experience.gate.prompt_lessons`: a quarantined one only in a
verification run, none in a judge's prompt, none today's scan flags). Their
texts go into every model call of that execution (the Lessons block of the system message) and
their ids into the attempt records' ``inputs_provenance`` (``lesson:<id>`` → ``memory``). When
the stage's evidence arrives — the same the bandit arms use: a judge's score for the stages it
judged, else the stage's gate decision, else its simulated quality or validity —
:meth:`LessonMemory.after_stage` rewards the lessons it carried (once per lesson and stage; never
in verification runs; stages with ``reward: external`` are not rewarded), and a promoted one
whose utility stays low is retired. Lessons never stop a run: if the store cannot be read or
written the run goes on without them, and the trace says so (a ``memory`` record).

Only plans with ``experience`` enabled do any of this, behind ``workflow.patched`` (``PATCH``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.runtime.models import Lessons, LessonsQuery, LessonsReward
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.templating import render
from workflows.interpreter.evidence import stage_evidence
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["LESSONS_TIMEOUT", "PATCH", "LessonMemory"]

#: workflow.patched id of the heuristics memory in runs.
PATCH = "experience-lessons"
#: A local model may load on a worker's first call.
LESSONS_TIMEOUT = timedelta(seconds=120)
#: The start of the rendered task that goes to relevance.
TASK_CHARS = 4000
_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


class LessonMemory:
    """Loads, tracks and rewards one run's lessons (nothing when experience is off)."""

    def __init__(self, run: RunContext, tracer: Tracer, given: list[str] | None) -> None:
        self.run = run
        self.tracer = tracer
        #: RunInput.lessons: exactly these ids, or None (the compiler chooses).
        self.given = given
        #: stage id → the lesson ids its executions carried (in first-use order).
        self.used: dict[str, list[str]] = {}
        self.loads: dict[str, int] = {}
        self.rewarded: set[str] = set()
        self._on: bool | None = None

    @property
    def on(self) -> bool:
        """Whether this run uses the heuristics memory (asks ``workflow.patched`` once, and
        only for plans with experience enabled)."""
        if self._on is None:
            config = self.run.plan.experience
            self._on = config is not None and config.enabled and workflow.patched(PATCH)
        return self._on

    async def load(self, stage: PlanStage, prompt: str, variables: dict[str, Any]) -> Lessons:
        """The lessons of one execution of an LLM stage (none when experience is off)."""
        config = self.run.plan.experience
        if config is None or not self.on or stage.role is None:
            return Lessons()
        n = self.loads[stage.id] = self.loads.get(stage.id, 0) + 1
        query = LessonsQuery(
            spec_name=self.run.plan.name,
            stage_id=stage.id,
            task_text=_task_text(prompt, variables),
            top_k=config.top_k,
            token_budget=config.token_budget,
            seed=f"{self.run.run_id}/{stage.id}/{n}",
            embedding_model=config.embedding_model,
            only_ids=self.given,
            verification=self.run.verification,
            judge=stage.role.type == "judge",
        )
        try:
            found: Lessons = await workflow.execute_local_activity(
                "load_lessons",
                query,
                result_type=Lessons,
                start_to_close_timeout=LESSONS_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"{stage.id}: load lessons",
            )
        except (ActivityError, ApplicationError) as exc:  # local activities raise the latter
            self._failed(
                "load", f"stage {stage.id!r}: lessons not loaded, it runs without", exc, stage.id
            )
            return Lessons()
        used = self.used.setdefault(stage.id, [])
        used += [i for i in found.ids if i not in used]
        self._trace(
            "loaded",
            stage.id,
            event="lessons",
            ids=found.ids,
            given=self.given is not None,
            embedder=found.embedder,
            **({"missing": found.missing} if found.missing else {}),
            **({"refused": found.refused} if found.refused else {}),
        )
        return found

    async def reward(self, stage_id: str, reward: float, source: str) -> None:
        """Reward the lessons the stage carried, once (never in a verification run)."""
        config = self.run.plan.experience
        ids = self.used.get(stage_id)
        if config is None or not ids or stage_id in self.rewarded or self.run.verification:
            return
        self.rewarded.add(stage_id)
        value = max(0.0, min(1.0, reward))
        try:
            await workflow.execute_local_activity(
                "reward_lessons",
                LessonsReward(
                    ids=ids,
                    reward=value,
                    key=f"{self.run.run_id}/{stage_id}",
                    at=workflow.now().isoformat(),
                    retire_below=config.retire_below,
                    min_uses=config.min_uses,
                ),
                result_type=int,
                start_to_close_timeout=LESSONS_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"{stage_id}: reward {len(ids)} lesson(s) {value:.3g}",
            )
        except (ActivityError, ApplicationError) as exc:
            self._failed("reward", f"stage {stage_id!r}: lessons not rewarded", exc, stage_id)
            return
        self._trace("rewarded", stage_id, event="reward", ids=ids, reward=value, source=source)

    def wanted(self) -> bool:
        """Whether finished stages may carry evidence for lessons."""
        return bool(self.used) and not self.run.verification

    async def after_stage(self, stage: PlanStage) -> None:
        """Reward lessons when the evidence arrives (as ``Arms.after_stage`` rewards arms): a
        judge's score for the stages it judged, else the stage's own gate decision, else its
        output quality; a failed or rejected stage rewards 0."""
        for stage_id, reward, why in stage_evidence(self.run, stage):
            if stage_id == stage.id and stage.id not in self.used:
                continue  # nothing was chosen for the stage itself
            await self.reward(stage_id, reward, why)

    def _trace(self, status: str, stage_id: str, **data: Any) -> None:
        self.tracer.chain.add(
            "memory", workflow.now().isoformat(), stage_id=stage_id, status=status, data=data
        )

    def _failed(
        self, event: str, message: str, exc: ActivityError | ApplicationError, stage_id: str
    ) -> None:
        self.tracer.memory_failed(message, exc, {"event": event}, stage_id)


def _task_text(prompt: str, variables: dict[str, Any]) -> str:
    """The stage's task as its prompt renders it (the template itself when it cannot render
    here: the activity will say why), cut to TASK_CHARS."""
    try:
        return render(prompt, variables).strip()[:TASK_CHARS]
    except Exception:  # jinja raises many types; relevance then reads the template
        return prompt[:TASK_CHARS]
