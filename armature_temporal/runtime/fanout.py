"""Pure helpers for fan-out stages: fair partitioning and the fan-in strategies."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.spec.compiler import PlanRole, PlanStage

__all__ = [
    "CONSENSUS_PROMPT",
    "ConsensusResult",
    "MergeResult",
    "consensus",
    "consensus_judge",
    "merge_outputs",
    "resolve_path",
    "split_fairly",
]


def split_fairly(items: list[Any], parts: int) -> list[list[Any]]:
    """Split ``items`` into at most ``parts`` contiguous, non-empty chunks whose sizes differ by
    at most one, larger chunks first (6 items in 4 → 2, 2, 1, 1). Empty input → no chunks."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    count = min(parts, len(items))
    if count == 0:
        return []
    size, extra = divmod(len(items), count)
    chunks, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        chunks.append(items[start:end])
        start = end
    return chunks


def resolve_path(variables: dict[str, Any], path: str) -> Any:
    """Follow a dot path (``inputs.topics``) through dicts; KeyError names the missing part."""
    value: Any = variables
    walked = []
    for part in path.split("."):
        walked.append(part)
        if isinstance(value, dict) and part in value:
            value = value[part]
        else:
            raise KeyError(f"{'.'.join(walked)!r} not found while resolving {path!r}")
    return value


class MergeResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    merged: dict[str, Any]
    conflicts: list[dict[str, Any]] = Field(default_factory=list)


def merge_outputs(outputs: list[Any]) -> MergeResult:
    """Merge dict outputs key by key. Precedence: the lowest child index wins a conflicting key;
    every conflict (key, the kept value, the dropped value and its child) is recorded."""
    merged: dict[str, Any] = {}
    owner: dict[str, int] = {}
    conflicts: list[dict[str, Any]] = []
    for index, output in enumerate(outputs):
        if not isinstance(output, dict):
            raise TypeError(
                f"merge fan-in needs dict outputs; child {index} returned {type(output).__name__}"
            )
        for key, value in output.items():
            if key not in merged:
                merged[key] = value
                owner[key] = index
            elif merged[key] != value:
                conflicts.append(
                    {
                        "key": key,
                        "kept_from": owner[key],
                        "kept": merged[key],
                        "dropped_from": index,
                        "dropped": value,
                    }
                )
    return MergeResult(merged=merged, conflicts=conflicts)


class ConsensusResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    value: Any
    agreement: float
    votes: int
    majority: bool


def consensus(outputs: list[Any]) -> ConsensusResult:
    """Majority vote over structurally equal outputs (compared as canonical JSON).

    ``majority`` is True when the winner has more than half the votes; ties go to the lowest
    child index. ``agreement`` is the winner's share of the votes.
    """
    if not outputs:
        raise ValueError("consensus needs at least one output")
    keys = [json.dumps(o, sort_keys=True, default=str) for o in outputs]
    counts = Counter(keys)
    best = max(counts.values())
    winner = next(k for k in keys if counts[k] == best)
    value = outputs[keys.index(winner)]
    return ConsensusResult(
        value=value, agreement=best / len(outputs), votes=best, majority=best * 2 > len(outputs)
    )


CONSENSUS_PROMPT = """\
Sub-agents answered the same task for stage {{ stage }} differently:
{% for o in outputs %}[{{ loop.index0 }}] {{ o | tojson_compact }}
{% endfor %}
Pick the answer best supported by the others (its index as choice) and score from 0 to 1 how
much the answers agree in substance."""


def consensus_judge(stage_id: str, tier: str, choices: int) -> PlanStage:
    """The judge stage that reconciles ``choices`` disagreeing child outputs of ``stage_id``:
    it picks one (``choice``) and scores how much they agree (``score``)."""
    return PlanStage(
        id=f"{stage_id}__consensus",
        kind="llm",
        role=PlanRole(
            name="Consensus judge", type="judge", model_tier=tier, prompt=CONSENSUS_PROMPT
        ),
        output_mode="json",
        output_schema={
            "type": "object",
            "properties": {
                "choice": {"type": "integer", "minimum": 0, "maximum": choices - 1},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
                "rationale": {"type": "string"},
            },
            "required": ["choice", "score", "rationale"],
        },
        max_attempts=3,
    )
