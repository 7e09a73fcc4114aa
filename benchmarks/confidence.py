"""Confidence benchmark: how well does each confidence source predict a bad attempt?

For every attempt, each source Armature extracts a confidence from is computed on its own
(``armature_temporal.runtime.confidence``): ``logprobs`` (the output tokens' probabilities),
``stated`` (the output's ``confidence`` field) and ``hedging`` (the calibrated hedge detector
on the text), plus ``chosen``, the one ``confidence_of`` picks (the best available). An
attempt is **bad** when it failed (its output did not parse or meet the schema) or was scored
low (a simulated judge on the judge tier scored it below 0.5). Printed per source: the
attempts it covers, the bad rate, and the AUROC of its confidence for telling good attempts
from bad (0.5 is chance; 1 is perfect), with a 95% bootstrap interval (``--boot`` resamples of
the attempts, percentile method, seeded).

**Simulated attempts** go through the same code as the ``llm_call`` activity — the prompt
builder, the simulate provider, the output parser, the extractors — without Temporal (this
measures the extractors, not the engine): ``--inputs`` questions on each of the tiers below,
one seeded call each, then one judge call on the judged latent quality. The simulator's world
is declared (README, "The simulate provider"): a hedged output (``hedge_rate``) carries hedging
language, loses ``HEDGE_PENALTY`` of latent quality, and states and logs lower confidence.

Read the simulated figures for what they are: the simulator *declares* its stated confidence
and its logprobs from the output's latent quality plus noise, so their AUROC measures that
declared noise and the extractors' arithmetic, not how well a real model's logprobs or stated
numbers predict its failures. The hedge detector is the one source tested on something it did
not see fitted: the simulator's hedging sentences, on a coin of their own, with the hedge
penalty on latent quality (and its weights were fitted on a corpus of its own, see
``armature_temporal/runtime/confidence``). Invalid outputs have no stated confidence, so the
second table compares every source on the same valid attempts.

**Recorded attempts**: with ``--store URL`` (a trace store), every recorded attempt whose
confidence came from logprobs (a real provider that returned them) is scored the same way,
bad being invalid or judged < 0.5 by the stage's judge (the dashboard's outcome rule). Offline
there are none: the simulator's logprobs are declared, not a model's, so they are not
"recorded data", and this repository ships no traces from real providers.

Run ``python benchmarks/confidence.py [--inputs 600] [--boot 1000] [--seed 7] [--store URL]
[--json]``. The default run takes well under a minute on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPEC = """\
name: bench-confidence
model_tiers:
  small: {provider: simulate, valid_rate: 0.9, quality: 0.6, hedge_rate: 0.4, logprobs: true}
  medium: {provider: simulate, valid_rate: 0.95, quality: 0.75, hedge_rate: 0.2, logprobs: true}
  frontier: {provider: simulate, valid_rate: 0.98, quality: 0.9, hedge_rate: 0.05, logprobs: true}
stages:
  - id: answer
    role: {name: Answerer, model_tier: small, description: "Answer this question: {{ q }}"}
    output_mode: json
    output_schema:
      type: object
      properties:
        answer: {type: string}
        confidence: {type: number, minimum: 0, maximum: 1}
      required: [answer, confidence]
  - id: review
    depends_on: [answer]
    role: {name: Reviewer, type: judge, model_tier: frontier, description: "Score {{ answer }}"}
"""
SOURCES = ("logprobs", "stated", "hedging", "chosen")
LOW_SCORE = 0.5


def auroc(scores: Sequence[float], bad: Sequence[bool]) -> float | None:
    """P(a good attempt's confidence > a bad one's), ties counting half (Mann–Whitney)."""
    pairs = sorted(zip(scores, bad, strict=True))
    n_bad = sum(bad)
    n_good = len(bad) - n_bad
    if n_bad == 0 or n_good == 0:
        return None
    rank_sum = 0.0  # of the good attempts, with average ranks over ties
    i = 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        average = (i + 1 + j) / 2
        rank_sum += average * sum(1 for k in range(i, j) if not pairs[k][1])
        i = j
    return (rank_sum - n_good * (n_good + 1) / 2) / (n_good * n_bad)


def bootstrap(
    scores: Sequence[float], bad: Sequence[bool], *, boot: int, seed: int
) -> tuple[float | None, float | None]:
    """The 95% percentile interval of the AUROC over ``boot`` resamples of the attempts."""
    rng = random.Random(seed)
    n = len(scores)
    values = []
    for _ in range(boot):
        idx = [rng.randrange(n) for _ in range(n)]
        value = auroc([scores[i] for i in idx], [bad[i] for i in idx])
        if value is not None:
            values.append(value)
    if not values:
        return None, None
    values.sort()
    return values[int(0.025 * (len(values) - 1))], values[int(0.975 * (len(values) - 1))]


async def simulated_attempts(inputs: int, seed: int) -> list[dict[str, Any]]:
    """One attempt per input and tier: each source's confidence, and whether it was bad."""
    from armature_temporal.runtime.confidence import (
        confidence_of,
        from_logprobs,
        hedge_confidence,
        stated_confidence,
    )
    from armature_temporal.runtime.confidence.extract import answer_text
    from armature_temporal.runtime.llm import complete
    from armature_temporal.runtime.parsing import parse_output
    from armature_temporal.runtime.prompts import build_messages
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text

    plan = compile_spec(load_spec_text(SPEC))
    stage, judge = plan.stage("answer"), plan.stage("review")
    assert stage.role is not None and judge.role is not None
    rows = []
    for i in range(inputs):
        for tier in plan.tier_ladder:
            messages = build_messages(
                role_type="worker",
                role_name=stage.role.name,
                prompt_template=stage.role.prompt,
                variables={"q": f"question {i}"},
                mission="",
                output_mode=stage.output_mode,
                output_schema=stage.output_schema,
            )
            key = f"bench{seed}/{i}/answer/1/{tier}"
            done = await complete(
                plan.tiers[tier],
                messages,
                seed=key,
                role_type="worker",
                output_mode=stage.output_mode,
                output_schema=stage.output_schema,
            )
            parsed = parse_output(done.text, stage.output_mode, stage.output_schema)
            output = parsed.value if parsed.valid else None
            score = None
            if parsed.valid:
                verdict = await complete(
                    plan.tiers[judge.role.model_tier],
                    messages,
                    seed=f"bench{seed}/{i}/review/1/{judge.role.model_tier}",
                    role_type="judge",
                    output_mode=judge.output_mode,
                    output_schema=judge.output_schema,
                    judged_quality=done.simulated_quality,
                )
                judged = parse_output(verdict.text, judge.output_mode, judge.output_schema)
                if judged.valid and isinstance(judged.value, dict):
                    score = float(judged.value.get("score", 0.0))
            logprobs = getattr(done, "logprobs", None)
            chosen = confidence_of(
                text=done.text, output=output, schema=stage.output_schema, logprobs=logprobs
            )
            rows.append(
                {
                    "tier": tier,
                    "bad": not parsed.valid or score is None or score < LOW_SCORE,
                    "valid": parsed.valid,
                    "logprobs": from_logprobs(logprobs),
                    "stated": stated_confidence(output, stage.output_schema),
                    "hedging": hedge_confidence(answer_text(done.text, output)),
                    "chosen": chosen.value,
                }
            )
    return rows


def recorded_attempts(url: str) -> list[dict[str, Any]]:
    """Attempts in a trace store whose confidence came from logprobs, with their outcome."""
    from armature_temporal.store import TraceStore
    from armature_temporal.views.calibration import stage_outcomes
    from armature_temporal.views.dashboard import load_runs

    rows = []
    for run in load_runs(TraceStore(url), limit=100_000):
        outcomes = stage_outcomes(run)
        for r in run.records:
            if r.kind != "attempt" or r.data.get("confidence_source") != "logprobs":
                continue
            good = r.output_valid and outcomes.get(r.stage_id or "", (True, ""))[0]
            value = float(r.data["confidence"])
            rows.append({"bad": not good, "logprobs": value, "chosen": value})
    return rows


def table(rows: list[dict[str, Any]], *, boot: int, seed: int) -> list[dict[str, Any]]:
    out = []
    for source in SOURCES:
        have = [r for r in rows if r.get(source) is not None]
        scores = [float(r[source]) for r in have]
        bad = [bool(r["bad"]) for r in have]
        low, high = bootstrap(scores, bad, boot=boot, seed=seed) if have else (None, None)
        out.append(
            {
                "source": source,
                "attempts": len(have),
                "bad_rate": round(sum(bad) / len(bad), 4) if bad else None,
                "auroc": None if not have else auroc(scores, bad),
                "ci95": [low, high],
            }
        )
    return out


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def show(title: str, result: list[dict[str, Any]]) -> None:
    print(title)
    print(f"  {'source':<10} {'attempts':>8} {'bad rate':>9} {'AUROC':>7}  95% interval")
    for row in result:
        low, high = row["ci95"]
        interval = "—" if low is None else f"[{low:.3f}, {high:.3f}]"
        print(
            f"  {row['source']:<10} {row['attempts']:>8} {_fmt(row['bad_rate']):>9} "
            f"{_fmt(row['auroc']):>7}  {interval}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=600, help="questions per tier")
    parser.add_argument("--boot", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--store", help="a trace store URL with recorded logprob attempts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = asyncio.run(simulated_attempts(args.inputs, args.seed))
    valid = [r for r in rows if r["valid"] and all(r[s] is not None for s in SOURCES)]
    report: dict[str, Any] = {
        "simulated": table(rows, boot=args.boot, seed=args.seed),
        "simulated_valid": table(valid, boot=args.boot, seed=args.seed),
        "recorded": None,
    }
    recorded = recorded_attempts(args.store) if args.store else []
    if recorded:
        report["recorded"] = table(recorded, boot=args.boot, seed=args.seed)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    show(
        f"simulated attempts ({args.inputs} inputs × 3 tiers; bad = invalid or judged "
        f"< {LOW_SCORE}):",
        report["simulated"],
    )
    show(
        f"the valid simulated attempts, every source on the same {len(valid)} (bad = judged "
        f"< {LOW_SCORE}):",
        report["simulated_valid"],
    )
    if report["recorded"] is None:
        where = f"in {args.store}" if args.store else "offline (no --store)"
        print(f"recorded attempts with logprobs: none {where}")
    else:
        show("recorded attempts with logprobs:", report["recorded"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
