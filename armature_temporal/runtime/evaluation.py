"""Post-run evaluation of a stage's ``evaluate`` criteria (pure: the judge and its verdict).

After a run's stages (post_run ones too), each completed stage that declares criteria is
judged once by a judge-tier model: it scores every criterion from 0 to 1 and explains why.
:func:`evaluation_judge` is that call's stage (the ``llm_call`` activity runs it; under the
``simulate`` provider its schema alone shapes the answer), :func:`evaluation_verdict` what the
run keeps of the answer.
"""

from __future__ import annotations

import json
from statistics import fmean
from typing import Any

from armature_temporal.spec.compiler import PlanRole, PlanStage

__all__ = [
    "EVALUATION_PROMPT",
    "JUDGED_OUTPUT_CHARS",
    "evaluation_judge",
    "evaluation_verdict",
    "judged_output",
]

#: The judged output is cut to this many characters in the prompt (with a marker).
JUDGED_OUTPUT_CHARS = 20_000

EVALUATION_PROMPT = """\
Evaluate the output of workflow stage {{ stage }} against each criterion below.

Output:
{{ output }}

Criteria:
{% for criterion in criteria %}{{ loop.index }}. {{ criterion }}
{% endfor %}
Score each criterion from 0 (not met at all) to 1 (fully met), keyed by the criterion's exact
text, and give a short rationale for the scores."""


def evaluation_judge(stage_id: str, criteria: list[str], tier: str) -> PlanStage:
    """The judge that scores ``stage_id``'s output on ``criteria`` (one number in [0, 1] per
    criterion, keyed by its text, and a ``rationale``), on ``tier``."""
    number = {"type": "number", "minimum": 0, "maximum": 1}
    keys = list(dict.fromkeys(criteria))
    return PlanStage(
        id=f"{stage_id}__evaluation",
        kind="llm",
        role=PlanRole(name="Evaluator", type="judge", model_tier=tier, prompt=EVALUATION_PROMPT),
        output_mode="json",
        output_schema={
            "type": "object",
            "properties": {**{c: number for c in keys}, "rationale": {"type": "string"}},
            "required": [*keys, "rationale"],
            "additionalProperties": False,
        },
        max_attempts=2,
    )


def judged_output(output: Any) -> str:
    """The output as the judge reads it: text as is, anything else as JSON, cut to
    :data:`JUDGED_OUTPUT_CHARS`."""
    if (
        isinstance(output, dict)
        and set(output) == {"content"}
        and isinstance(output["content"], str)
    ):
        text = output["content"]  # a text stage's output
    elif isinstance(output, str):
        text = output
    else:
        text = json.dumps(output, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > JUDGED_OUTPUT_CHARS:
        text = text[:JUDGED_OUTPUT_CHARS] + "...[truncated]"
    return text


def evaluation_verdict(criteria: list[str], answer: dict[str, Any], tier: str) -> dict[str, Any]:
    """What the run keeps of a valid answer: ``{scores, mean, rationale, tier}``, the scores
    in the criteria's order."""
    scores = {c: float(answer[c]) for c in dict.fromkeys(criteria)}
    return {
        "scores": scores,
        "mean": fmean(scores.values()),
        "rationale": str(answer.get("rationale", "")),
        "tier": tier,
    }
