"""``Memory``: a spec's cross-run memory (``memory:``), kept in the trace store.

At run start :meth:`Memory.load` reads what earlier runs captured under the plan's memory name
(``memory.workflow_name``, else the spec's name: specs never mix memories unless one names the
other's), shaped as armature-agents 0.7.0 injected it: ``{stage: {key: [newest, ..., oldest]}}``,
each list at most its capture's ``max_entries``. After a stage completes,
:meth:`Memory.capture` keeps the captured keys of its output (a rolling window per stage and
key: the oldest go first), each value with its provenance (run, stage, ``workflow.now()``).

Memory never stops a run: if the store cannot be read or written, the run goes on without it,
and the trace says so (a ``memory`` record with the error).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.runtime.models import (
    MemoryCapture,
    MemoryEntry,
    MemoryQuery,
    MemoryValues,
)
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["MEMORY_TIMEOUT", "STALE_AFTER", "Memory"]

MEMORY_TIMEOUT = timedelta(seconds=30)
#: Values older than this are flagged stale at load (0.7.0's ``_stale_memory_keys``).
STALE_AFTER = timedelta(days=30)
_RETRY = RetryPolicy(maximum_attempts=3, initial_interval=timedelta(seconds=1))


class Memory:
    """Loads and captures one run's cross-run memory (nothing when the plan has none)."""

    def __init__(self, run: RunContext, tracer: Tracer) -> None:
        self.run = run
        self.tracer = tracer
        #: What :meth:`load` returned.
        self.values: dict[str, dict[str, list[Any]]] = {}
        #: ``stage.key`` names holding a value older than :data:`STALE_AFTER`, sorted.
        self.stale_keys: list[str] = []

    @property
    def name(self) -> str:
        """The namespace this run's memory is kept under."""
        return self.run.plan.memory_name or self.run.plan.name

    def _limits(self) -> dict[str, int]:
        config = self.run.plan.memory
        return {f"{c.stage}.{c.key}": c.max_entries for c in config.capture} if config else {}

    async def load(self) -> dict[str, dict[str, list[Any]]]:
        """The memory to inject as ``memory.inject_as``: ``{stage: {key: [newest, ...,
        oldest]}}``; ``{}`` without ``memory:``, with ``fresh: true``, on the first run, or
        when the store cannot be read."""
        config = self.run.plan.memory
        if config is None:
            return {}
        if config.fresh:
            self._trace("fresh", event="load")
            return {}
        try:
            found: MemoryValues = await workflow.execute_local_activity(
                "load_memory",
                MemoryQuery(memory_name=self.name, limits=self._limits()),
                result_type=MemoryValues,
                start_to_close_timeout=MEMORY_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"load memory {self.name!r}",
            )
        except (ActivityError, ApplicationError) as exc:  # local activities raise the latter
            self._failed(
                "load", f"memory {self.name!r} not loaded, the run goes on without it", exc
            )
            return {}
        values: dict[str, dict[str, list[Any]]] = {}
        for entry in reversed(found.entries):  # newest first
            values.setdefault(entry.stage, {}).setdefault(entry.key, []).append(entry.value)
        now = workflow.now()
        self.values = values
        self.stale_keys = sorted(
            {
                f"{e.stage}.{e.key}"
                for e in found.entries
                if now - datetime.fromisoformat(e.recorded_at) > STALE_AFTER
            }
        )
        counts: dict[str, int] = {}
        for e in found.entries:
            counts[f"{e.stage}.{e.key}"] = counts.get(f"{e.stage}.{e.key}", 0) + 1
        self._trace(
            "loaded",
            event="load",
            entries=counts,
            runs=sorted({e.run_id for e in found.entries}),
            stale_keys=self.stale_keys,
        )
        return values

    async def capture(self, stage_id: str, output: Any) -> None:
        """Keep the captured keys of a completed stage's output (those present and not null).
        Verification runs of the improvement loop capture nothing: they replay, they do not
        add to what later runs remember."""
        config = self.run.plan.memory
        if config is None or self.run.verification or not isinstance(output, dict):
            return
        now = workflow.now().isoformat()
        entries = [
            MemoryEntry(
                stage=stage_id,
                key=c.key,
                value=output[c.key],
                run_id=self.run.run_id,
                recorded_at=now,
            )
            for c in config.capture
            if c.stage == stage_id and output.get(c.key) is not None
        ]
        if not entries:
            return
        keys = [e.key for e in entries]
        try:
            await workflow.execute_local_activity(
                "capture_memory",
                MemoryCapture(memory_name=self.name, entries=entries, limits=self._limits()),
                result_type=int,
                start_to_close_timeout=MEMORY_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"{stage_id}: remember {', '.join(keys)}",
            )
        except (ActivityError, ApplicationError) as exc:
            self._failed(
                "capture",
                f"stage {stage_id!r}: {keys} not remembered, the run goes on",
                exc,
                stage_id=stage_id,
            )
            return
        self._trace("captured", event="capture", stage_id=stage_id, keys=keys)

    def _trace(self, status: str, *, stage_id: str | None = None, **data: Any) -> None:
        self.tracer.chain.add(
            "memory",
            workflow.now().isoformat(),
            stage_id=stage_id,
            status=status,
            data={"memory_name": self.name, **data},
        )

    def _failed(
        self,
        event: str,
        message: str,
        exc: ActivityError | ApplicationError,
        *,
        stage_id: str | None = None,
    ) -> None:
        data = {"memory_name": self.name, "event": event}
        self.tracer.memory_failed(message, exc, data, stage_id)
