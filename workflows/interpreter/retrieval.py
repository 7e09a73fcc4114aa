"""``Retrieval``: a stage's ``retrieve:`` and the ``retrieve`` tool, in a run.

Each execution of a stage with ``retrieve:`` renders its query once and searches its
collection (the ``search_knowledge`` activity, on the main queue); the passages go into every
model call of that execution (the prompt's Knowledge block) and their references into the
attempt records' ``inputs_provenance`` (``knowledge:<source>#<chunk>`` → ``knowledge``). A
model's ``retrieve`` call is answered the same way, from the stage's collection (its
``retrieve:``'s, else the spec's). Every search leaves a ``retrieval`` trace record: the query,
the collection and each passage's reference, hash and score — what ``armature report`` shows
as the passages a stage saw.

A stage whose collection has nothing indexed fails (``knowledge_empty``, with the command that
builds it); a model's call to an empty one gets that error as its tool result.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from armature_temporal.runtime.retrieval import KnowledgeFound, KnowledgeQuery
from armature_temporal.spec.compiler import PlanStage
from armature_temporal.spec.templating import render
from workflows.interpreter.failures import StageFailure
from workflows.interpreter.state import RunContext
from workflows.interpreter.tracing import Tracer

__all__ = ["SEARCH_TIMEOUT", "Retrieval"]

#: The first search of a worker process loads the embedding model.
SEARCH_TIMEOUT = timedelta(seconds=120)
_RETRY = RetryPolicy(maximum_attempts=5, initial_interval=timedelta(seconds=1))
#: Most passages one ``retrieve`` call returns.
TOOL_MAX_K = 20


class Retrieval:
    """Searches for one run's stages, and traces each search."""

    def __init__(self, run: RunContext, tracer: Tracer) -> None:
        self.run = run
        self.tracer = tracer
        #: stage id → the passages its ``retrieve:`` found last (a judge of it is shown them).
        self.seen: dict[str, list[dict[str, Any]]] = {}
        #: stage id → the references its ``retrieve`` tool calls returned (citable too).
        self.tool_refs: dict[str, list[str]] = {}

    def shown(self, stage: PlanStage, passages: list[dict[str, Any]]) -> list[str]:
        """The references a stage's answer may cite: its prompt's and its tool calls'."""
        refs = [p["ref"] for p in passages]
        return list(dict.fromkeys([*refs, *self.tool_refs.get(stage.id, [])]))

    def judged(self, stage: PlanStage) -> list[dict[str, Any]]:
        """For a judge: the passages the stages it judges (its depends_on) were shown, so it
        can check their citations; none for other stages."""
        if stage.role is None or stage.role.type != "judge":
            return []
        found: dict[str, dict[str, Any]] = {}
        for dep in stage.depends_on:
            for p in self.seen.get(dep, []):
                found.setdefault(p["ref"], p)
        return list(found.values())

    async def for_stage(self, stage: PlanStage, variables: dict[str, Any]) -> list[dict[str, Any]]:
        """The passages for one execution of a stage with ``retrieve:``; for a judge without
        one, those its judged stages were shown (:meth:`judged`); else none."""
        spec = stage.retrieve
        if spec is None:
            return self.judged(stage)
        assert spec.collection is not None, "the compiler resolves retrieve.collection"
        try:
            query = render(spec.query, variables).strip()
        except Exception as exc:  # jinja raises many types
            raise StageFailure(
                "template_error", f"stage {stage.id!r}: retrieve.query failed to render: {exc}"
            ) from exc
        try:
            self.seen[stage.id] = await self._search(
                stage,
                KnowledgeQuery(
                    collection=spec.collection,
                    query=query,
                    k=spec.k,
                    mode=spec.mode,
                    sources=list(spec.sources),
                ),
                "retrieve",
            )
            return self.seen[stage.id]
        except (ActivityError, ApplicationError) as exc:
            cause = exc.cause or exc
            raise StageFailure(
                "knowledge_error", f"stage {stage.id!r}: retrieve failed: {cause}"
            ) from exc

    def tool_collection(self, stage: PlanStage) -> str | None:
        """The collection a model's ``retrieve`` call searches on this stage."""
        if stage.retrieve is not None:
            return stage.retrieve.collection
        return self.run.plan.knowledge_collection

    async def tool(self, stage: PlanStage, arguments: dict[str, Any]) -> dict[str, Any]:
        """A model's ``retrieve`` call: ``{passages}``, or ``{error, error_type}`` for a bad
        call or an empty collection (the model reads it and goes on)."""
        collection = self.tool_collection(stage)
        query = arguments.get("query")
        k = arguments.get("k", 4)
        if collection is None:
            return {"error": "this workflow has no knowledge", "error_type": "unknown_tool"}
        if not isinstance(query, str) or not query.strip():
            return {"error": "retrieve needs query: the words to look for", "error_type": "args"}
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= TOOL_MAX_K:
            return {"error": f"k must be an integer from 1 to {TOOL_MAX_K}", "error_type": "args"}
        try:
            passages = await self._search(
                stage,
                KnowledgeQuery(collection=collection, query=query.strip(), k=k),
                "tool",
            )
        except (ActivityError, ApplicationError) as exc:
            cause = exc.cause or exc
            kind = getattr(cause, "type", None) or "knowledge_error"
            return {"error": str(getattr(cause, "message", cause)), "error_type": kind}
        self.tool_refs.setdefault(stage.id, []).extend(p["ref"] for p in passages)
        keep = ("ref", "heading", "text", "warning")
        return {"passages": [{k: p[k] for k in keep if k in p} for p in passages]}

    async def _search(
        self, stage: PlanStage, query: KnowledgeQuery, via: str
    ) -> list[dict[str, Any]]:
        try:
            found: KnowledgeFound = await workflow.execute_activity(
                "search_knowledge",
                query,
                result_type=KnowledgeFound,
                start_to_close_timeout=SEARCH_TIMEOUT,
                retry_policy=_RETRY,
                summary=f"{stage.id}: search {query.collection!r} ({via})",
            )
        except (ActivityError, ApplicationError) as exc:
            cause = exc.cause or exc
            self.tracer.chain.add(
                "retrieval",
                workflow.now().isoformat(),
                stage_id=stage.id,
                status="failed",
                error=str(cause),
                data={"via": via, "collection": query.collection, "query": query.query},
            )
            raise
        self.tracer.chain.add(
            "retrieval",
            workflow.now().isoformat(),
            stage_id=stage.id,
            status="completed",
            data={
                "via": via,
                "collection": query.collection,
                "query": query.query,
                "k": query.k,
                **({"sources": query.sources} if query.sources else {}),
                "passages": [
                    {
                        "ref": p["ref"],
                        "sha256": p["sha256"],
                        "score": p["score"],
                        **({"scan": p["scan"]} if p.get("scan") else {}),
                    }
                    for p in found.passages
                ],
            },
        )
        return found.passages
