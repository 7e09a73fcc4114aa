"""The simulator's refiner: what a ``simulate`` tier answers to the improvement loop's refiner
prompt (``armature_temporal/improve/refine.py``).

A prompt is a refiner prompt when it carries :data:`REFINER_MARKER`; its facts are the JSON
object between :data:`FACTS_OPEN` and :data:`FACTS_CLOSE`::

    {"k": 3, "ladder": ["small", "frontier"],
     "surfaces": {"draft.model_tier": "small", "draft.temperature": 0.7, ...},
     "stages": [{"stage": "draft", "output_mode": "json", "invalid_rate": 0.4, ...}],
     "failures": ["output_invalid:draft", ...],
     "avoid": [["draft", "model_tier", "frontier"], ...]}

The declared behaviour, read off those facts (nothing is tuned to a test): per stage, in the
order given, with the proposer's thresholds (invalid >= 20%, escalated >= 20%, failed >= 10%,
judged below 0.7, any truncation):

- judged low: ``model_tier`` one step up the ladder;
- invalid, escalated or failed: ``model_tier`` one step up, ``temperature`` to 0 (when above 0)
  and, on a JSON stage, ``description`` plus a JSON-only sentence (:data:`JSON_ONLY`);
- truncated: ``max_tokens`` doubled (4096 when unset);
- easy (every run done at its first try, nothing failing on it): ``model_tier`` one step down;
- a pitfall's symptom shown: ``description`` plus the pitfall's ``lesson`` — the instruction
  that, carried by the stage's prompt, avoids the pitfall (see :mod:`._pitfalls`). The refiner
  is handed the world's pitfalls (``pitfalls``: every stage's, as the distiller is handed its
  stage's) but, like the distiller and the critic (:mod:`._learning`), it states a lesson only
  when the prompt shows it the symptom: on a transcript line that starts with the stage's id
  (``  draft [tier] completed output: ...``), outside the facts block. It notices a shown
  symptom with probability ``min(1, 0.5 + quality)`` (the distiller's rate, its own coin per
  stage and pitfall); a lesson the description already carries is not stated again. This is
  the strongest evidence it has (weight 4: above a tier step);
- judged low and no lesson to state: ``description`` plus a plausible exhortation drawn from
  :data:`GENERIC_WORDINGS` ("Be thorough and careful.") — what a refiner writes when it sees
  weak output but not its cause. It carries no lesson, so in this world it changes no latent
  quality, and verification on paired runs rejects it (weight 0.8: below every other option).

Reflection (a frontier search's prompt, whose facts carry ``failing_cases``: each case's
``stage``, ``output`` and ``reason``): for each of the given ``pitfalls`` whose symptom the
failing case's answer or reason shows (case and whitespace aside), ``description`` of that
case's stage plus the pitfall's lesson, ranked first (weight 4). The same honesty rule as the
simulated distiller and critic: a lesson is stated only when its symptom was shown; a pitfall
whose symptom no failing case shows stays unknown to it.

Options on surfaces not listed, equal to the current value or listed in ``avoid`` are left out.
The remaining ones are ranked by how bad the evidence is (ties broken by a draw seeded from the
prompt), and each of the ``k`` answers is, with probability ``1 - quality``, replaced by a guess:
a random listed ``model_tier`` or ``temperature`` surface set to a random value (a weak refiner
proposes plausible changes that the traces do not support; verification rejects them). The
reply is one JSON object ``{"proposals": [...]}``. The draws are seeded from the seed and the
facts, less the stages' measured latency and cost (wall-clock figures that differ between two
histories of the same runs): the same seed and evidence give the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from armature_temporal.runtime.simulate._pitfalls import lesson_present, normalised
from armature_temporal.runtime.simulate._words import rng_for
from armature_temporal.spec.simulation import Pitfall

__all__ = [
    "FACTS_CLOSE",
    "FACTS_OPEN",
    "GENERIC_WORDINGS",
    "JSON_ONLY",
    "REFINER_MARKER",
    "simulate_refiner",
]

REFINER_MARKER = "[armature-refiner v1]"
FACTS_OPEN = "<refiner-facts>"
FACTS_CLOSE = "</refiner-facts>"
JSON_ONLY = "Reply with the JSON object alone: no prose, no code fence, every required field."
#: Plausible-sounding rewordings that state no lesson (a refiner's guess at weak output).
GENERIC_WORDINGS = (
    "Be thorough and careful.",
    "Think step by step and double-check the answer.",
    "Write clearly and precisely.",
)


def _facts(prompt: str) -> dict[str, Any]:
    start = prompt.find(FACTS_OPEN)
    end = prompt.find(FACTS_CLOSE, start + 1)
    if start < 0 or end < 0:
        return {}
    try:
        value = json.loads(prompt[start + len(FACTS_OPEN) : end])
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _step(ladder: list[str], tier: Any, by: int) -> str | None:
    if tier not in ladder:
        return None
    k = ladder.index(tier) + by
    return ladder[k] if 0 <= k < len(ladder) else None


def _shown(prompt: str, stage: str) -> str:
    """The transcript lines of ``stage`` in the prompt (outside the facts block), normalised:
    the lines that start, after indentation, with the stage's id and a space."""
    start = prompt.find(FACTS_OPEN)
    end = prompt.find(FACTS_CLOSE, start + 1)
    rest = prompt if start < 0 or end < 0 else prompt[:start] + prompt[end + len(FACTS_CLOSE) :]
    lines = [line for line in rest.splitlines() if line.strip().startswith(f"{stage} ")]
    return normalised("\n".join(lines))


def _lessons(
    seed: str, prompt: str, stage: str, text: str, pitfalls: Sequence[Pitfall], quality: float
) -> list[str]:
    """The lessons the refiner states for ``stage``: those of pitfalls whose symptom its
    transcript lines show, noticed (``min(1, 0.5 + quality)``), and not already in ``text``."""
    shown = _shown(prompt, stage)
    notice = min(1.0, 0.5 + quality)
    found: list[str] = []
    for p in pitfalls:
        if normalised(p.symptom) not in shown or lesson_present(p.lesson, text):
            continue
        if p.lesson in found:
            continue
        if rng_for(f"{seed}/refiner-notice/{stage}/{p.id}").random() < notice:
            found.append(p.lesson)
    return found


def _options(
    facts: dict[str, Any],
    *,
    seed: str = "",
    prompt: str = "",
    pitfalls: Sequence[Pitfall] = (),
    quality: float = 1.0,
) -> list[tuple[float, dict[str, Any]]]:
    ladder = [str(t) for t in facts.get("ladder", [])]
    surfaces: dict[str, Any] = facts.get("surfaces", {}) or {}
    failing = set(facts.get("failures", []) or [])
    found: list[tuple[float, dict[str, Any]]] = []

    def add(
        weight: float, stage: str, field: str, value: Any, why: str, kinds: tuple[str, ...]
    ) -> None:
        surface = f"{stage}.{field}"
        if surface not in surfaces or value is None or surfaces[surface] == value:
            return
        if any(
            o["stage"] == stage and o["surface"] == field and o["value"] == value for _, o in found
        ):
            return  # the same edit, found by a failing case and by the transcripts
        fixes = sorted(c for k in kinds if (c := f"{k}:{stage}") in failing)
        risks = [f"low_judge:{stage}"] if field in ("temperature", "description") else []
        if field == "model_tier" and not kinds:
            risks = [f"low_judge:{stage}"]
        found.append(
            (
                weight,
                {
                    "surface": field,
                    "stage": stage,
                    "value": value,
                    "rationale": f"[simulated] {why}",
                    "predicted_fixes": fixes,
                    "predicted_regressions": [r for r in risks if r not in failing],
                },
            )
        )

    for case in facts.get("failing_cases", []) or []:
        if not isinstance(case, dict) or not isinstance(case.get("stage"), str):
            continue
        stage = case["stage"]
        shown = normalised(f"{case.get('output', '')} {case.get('reason', '')}")
        text = surfaces.get(f"{stage}.description")
        for pitfall in pitfalls:
            if not isinstance(text, str) or normalised(pitfall.symptom) not in shown:
                continue
            if lesson_present(pitfall.lesson, text):
                continue
            add(
                4.0,
                stage,
                "description",
                text.rstrip("\n") + "\n" + pitfall.lesson + "\n",
                f"case {case.get('description')!r} shows {pitfall.symptom!r}; say so in the "
                "stage's instructions",
                ("low_judge",),
            )
    for s in facts.get("stages", []) or []:
        if not isinstance(s, dict) or not s.get("runs"):
            continue
        stage = str(s.get("stage"))
        tier = surfaces.get(f"{stage}.model_tier", s.get("tier"))
        scored = s.get("judge_score")
        judge = float(scored) if isinstance(scored, int | float) else 1.0
        low_judge = judge < 0.7
        invalid = float(s.get("invalid_rate", 0))
        struggling = (
            invalid >= 0.2
            or float(s.get("escalation_rate", 0)) >= 0.2
            or float(s.get("failure_rate", 0)) >= 0.1
        )
        trouble = ("output_invalid", "escalated", "stage_failed")
        if low_judge:
            add(
                3 + (0.7 - judge),
                stage,
                "model_tier",
                _step(ladder, tier, 1),
                f"judges scored {stage} {judge:.2f}; a stronger tier writes better",
                ("low_judge",),
            )
        if struggling:
            add(
                2 + invalid,
                stage,
                "model_tier",
                _step(ladder, tier, 1),
                f"{stage} is often invalid, escalated or failed on {tier}",
                (*trouble, "low_confidence"),
            )
            temperature = surfaces.get(f"{stage}.temperature", s.get("temperature"))
            if isinstance(temperature, int | float) and temperature > 0:
                add(
                    1.5 + invalid,
                    stage,
                    "temperature",
                    0.0,
                    f"{stage} is invalid in {invalid:.0%} of attempts; sample without noise",
                    trouble,
                )
            text = surfaces.get(f"{stage}.description")
            if s.get("output_mode") != "text" and isinstance(text, str) and JSON_ONLY not in text:
                add(
                    1 + invalid,
                    stage,
                    "description",
                    text.rstrip("\n") + "\n" + JSON_ONLY + "\n",
                    f"{stage}'s replies often miss the schema; say what the reply must be",
                    trouble,
                )
        text = surfaces.get(f"{stage}.description")
        lessons = (
            _lessons(seed, prompt, stage, text, pitfalls, quality) if isinstance(text, str) else []
        )
        if isinstance(text, str) and lessons:
            shown = "; ".join(lessons)
            add(
                4,
                stage,
                "description",
                text.rstrip("\n") + "\n" + "\n".join(lessons) + "\n",
                f"{stage}'s outputs in the worst runs show a known mistake; tell it: {shown}",
                ("low_judge",),
            )
        elif isinstance(text, str) and low_judge:
            wording = rng_for(f"{seed}/refiner-wording/{stage}").choice(GENERIC_WORDINGS)
            if wording not in text:
                add(
                    0.8,
                    stage,
                    "description",
                    text.rstrip("\n") + "\n" + wording + "\n",
                    f"judges scored {stage} {judge:.2f}; ask it for more care",
                    ("low_judge",),
                )
        if s.get("truncated"):
            tokens = surfaces.get(f"{stage}.max_tokens", s.get("max_tokens"))
            new = int(tokens) * 2 if isinstance(tokens, int) and tokens > 0 else 4096
            add(
                2.5,
                stage,
                "max_tokens",
                new,
                f"{stage}'s replies were cut off at the limit",
                ("truncated", "output_invalid", "stage_failed"),
            )
        easy = (
            float(s.get("first_try_rate", 0)) >= 1.0
            and not struggling
            and not low_judge
            and not s.get("truncated")
        )
        if easy:
            add(
                0.5,
                stage,
                "model_tier",
                _step(ladder, tier, -1),
                f"{stage} is done at its first try in every run; a cheaper tier may do",
                (),
            )
    return found


#: Stage figures in the facts that no declared behaviour reads, and that differ between two
#: histories of the same runs (they are measured on the wall clock).
_MEASURED = ("mean_latency_ms", "mean_cost_usd")


def _drawn_from(facts: dict[str, Any]) -> str:
    """What the refiner's draws are seeded from: its facts, less the measured figures, so that
    equal evidence gets equal answers however fast the runs behind it happened to be."""
    stages = [
        {k: v for k, v in s.items() if k not in _MEASURED} if isinstance(s, dict) else s
        for s in facts.get("stages", []) or []
    ]
    return json.dumps({**facts, "stages": stages}, sort_keys=True, default=str)


def simulate_refiner(
    *, seed: str, prompt: str, quality: float, pitfalls: Sequence[Pitfall] = ()
) -> str:
    """The simulated refiner's reply to ``prompt`` (see the module docstring), as JSON text.
    ``pitfalls``: the declared pitfalls of the spec's stages (the world's lessons), stated
    only for a stage whose transcript lines in ``prompt``, or a failing case it is shown,
    show the pitfall's symptom."""
    facts = _facts(prompt)
    drawn = _drawn_from(facts) if facts else prompt
    rng = rng_for(f"{seed}/refiner/{drawn}")
    avoid = {json.dumps(a, sort_keys=True) for a in facts.get("avoid", []) or []}
    found = _options(
        facts, seed=f"{seed}/{drawn}", prompt=prompt, pitfalls=pitfalls, quality=quality
    )
    options = [
        (w, rng.random(), o)
        for w, o in found
        if json.dumps([o["stage"], o["surface"], o["value"]], sort_keys=True) not in avoid
    ]
    options.sort(key=lambda x: (-x[0], x[1]))
    k = int(facts.get("k", 3) or 3)
    ladder = [str(t) for t in facts.get("ladder", [])]
    guessable = [
        s for s in facts.get("surfaces", {}) or {} if s.endswith((".model_tier", ".temperature"))
    ]
    answers: list[dict[str, Any]] = []
    for _, _, option in options[:k]:
        if guessable and rng.random() >= quality:
            stage, _, field = rng.choice(sorted(guessable)).rpartition(".")
            value: Any = (
                rng.choice(ladder) if field == "model_tier" and ladder else round(rng.random(), 1)
            )
            option = {
                "surface": field,
                "stage": stage,
                "value": value,
                "rationale": "[simulated] a guess the traces do not support",
                "predicted_fixes": [],
                "predicted_regressions": [],
            }
        answers.append(option)
    return json.dumps({"proposals": answers})
