"""``llm-rubric``'s judge: a tier of the spec scores a case's output against a rubric.

The judge is a tier the spec declares (an assertion's ``provider:`` names it; default
``frontier``, else the spec's largest). It is called once per assertion and run, from the eval
process, through the same :func:`armature_temporal.runtime.llm.complete` the ``llm_call``
activity uses, with a judge's contract: ``{score in [0, 1], reason}``.

On the ``simulate`` provider the judge is the simulator's judge (see
:mod:`armature_temporal.runtime.simulate`): it reads the *latent quality* of the output it
judges — here the simulated quality the trace store recorded for the asserted stage's final
attempt — plus its tier's noise, seeded from the run's inputs, its replicate and the
assertion, so two specs compared on one case share it. It reads quality, not words: a rubric's
wording changes nothing under simulate. Without a recorded quality (a tool stage, a store the
worker does not write to) it scores its own latent quality, as a simulate judge does.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from armature_temporal.spec.compiler import Plan, ResolvedTier

__all__ = ["ATTEMPTS", "RUBRIC_SCHEMA", "judge_tier", "rubric_score", "sim_seed"]

#: Tries a judge gets to answer with a usable score before the assertion is a grader error.
ATTEMPTS = 2

RUBRIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string", "maxLength": 400},
    },
    "required": ["score", "reason"],
}

_PROMPT = """\
Grade the output below against the rubric. Score from 0 (does not meet it at all) to 1 (meets
it fully), and say why in one or two sentences.

Rubric:
{rubric}

Output:
{output}"""


def sim_seed(inputs: dict[str, Any], replicate: int) -> str:
    """The simulate seed a run with these (prepared) inputs and replicate has, as the workflow
    computes it (``workflows/interpreter/llm.py``)."""
    from armature_temporal.spec.plan import canonical_json

    digest = hashlib.sha256(canonical_json(inputs).encode("utf-8")).hexdigest()
    return f"{digest[:16]}/r{replicate}"


def judge_tier(plan: Plan, name: str | None) -> ResolvedTier:
    """The tier that grades: ``name``, else ``frontier``, else the spec's largest.

    Raises:
        KeyError: ``name`` is not a tier of the spec (the message lists them).
    """
    if name is None:
        name = "frontier" if "frontier" in plan.tiers else list(plan.tiers)[-1]
    if name not in plan.tiers:
        raise KeyError(
            f"llm-rubric provider {name!r} is not a tier of spec {plan.name!r}; its tiers: "
            f"{list(plan.tiers)}"
        )
    return plan.tiers[name]


async def rubric_score(
    tier: ResolvedTier,
    rubric: str,
    output: str,
    *,
    seed: str,
    judged_quality: float | None,
) -> tuple[float, str]:
    """The judge's score and reason.

    Raises:
        RuntimeError: the judge did not answer, or answered without a usable score (the
            message says which); the caller reports it as a grader error.
    """
    from armature_temporal.runtime.llm import ProviderError, complete

    messages = [
        {"role": "system", "content": "You are a strict grader. Answer in JSON."},
        {"role": "user", "content": _PROMPT.format(rubric=rubric, output=output[:20_000])},
    ]
    from armature_temporal.runtime.parsing import parse_output

    said = ""
    for attempt in range(1, ATTEMPTS + 1):  # a judge's invalid answer is retried, as a stage's
        try:
            answer = await complete(
                tier,
                messages,
                seed=f"{seed}/{attempt}",
                role_type="judge",
                output_mode="json",
                output_schema=RUBRIC_SCHEMA,
                judged_quality=judged_quality,
            )
        except ProviderError as exc:
            raise RuntimeError(f"the judge tier {tier.name!r} did not answer: {exc}") from None
        parsed = parse_output(answer.text, "json", RUBRIC_SCHEMA)
        if parsed.valid:
            return float(parsed.value["score"]), str(parsed.value.get("reason", ""))[:200]
        said = f"{parsed.error} (answer: {answer.text[:120]!r})"
    raise RuntimeError(
        f"the judge tier {tier.name!r} gave no usable score in {ATTEMPTS} tries: {said}"
    )
