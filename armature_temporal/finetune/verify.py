"""When a trained adapter is verified: against the base model, and in paired runs of the spec.

An adapter is **verified** only when both hold:

(a) its held-out reply loss is below the *base model's* on the same held-out examples (the
    examples :func:`~armature_temporal.finetune.train.split_examples` kept out of training);
    for a preference-tuned (DPO) adapter, its held-out preference accuracy is above the base
    model's 50% (:func:`preference_beats_base`, on the pairs
    :func:`~armature_temporal.finetune.preference.split_pairs` kept out of training);
(b) the spec with the adapter scores at least as well as without it: paired runs on the
    held-out examples' inputs — run ``i`` of the spec as it is and run ``i`` with the stage
    served by the base model plus the adapter (:func:`with_adapter`) share their inputs and
    their simulated noise — pass a **non-inferiority** test on the paired HQS differences
    (with − without): the Holm-adjusted interval's low end is above
    ``-finetune.noninferiority_margin`` (:mod:`armature_temporal.improve.stats`; one round's
    adapters are one Holm family, family-wise 5%). A DPO adapter must show the spec
    **better** with it: the low end above 0 (verdict ``paired_not_better`` otherwise) — it
    was trained to fix the failures its pairs record, so no better is not good enough.

With fewer than :data:`MIN_PAIRS` pairs that both scored, nothing is verified: the verdict is
``insufficient_evidence``. And the paired runs can only vouch for what HQS sees: where no judge
that can read the adapter's replies reads its stage (:func:`judged_stages`), HQS sees whether
they parse, never whether they are any good — an adapter whose replies are noise ties with the
base model — so an adapter that passes there is ``unmeasurable``, not verified (one that
scores worse is still ``paired_worse``: that much the measure did see).

Pure functions over pydantic models: no torch, no store, no Temporal (the workflow calls
:func:`with_adapter` itself).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from armature_temporal.finetune.models import (
    AdapterVerdict,
    Example,
    PreferencePair,
    PreferenceReport,
    TrainReport,
)
from armature_temporal.finetune.preference import split_pairs
from armature_temporal.finetune.train import split_examples
from armature_temporal.improve.propose import paired_verdict
from armature_temporal.improve.stats import holm
from armature_temporal.spec.compiler import Plan, ResolvedTier

__all__ = [
    "DEFAULT_MARGIN",
    "MIN_PAIRS",
    "AdapterCheck",
    "Evidence",
    "base_loss",
    "beats_base",
    "decide_adapters",
    "heldout_beats_base",
    "heldout_inputs",
    "judged_stages",
    "preference_beats_base",
    "preference_heldout_inputs",
    "with_adapter",
]

#: Paired runs (both sides scored) an adapter needs before it can be verified.
MIN_PAIRS = 5
#: ``finetune.noninferiority_margin``'s default.
DEFAULT_MARGIN = 0.02


def base_loss(report: TrainReport) -> float:
    """The base model's held-out loss: measured with the adapter switched off after training,
    or (a report from before that) the loss before training, which is the same model."""
    return report.base_loss if report.base_loss is not None else report.eval_loss_before


def beats_base(report: TrainReport) -> bool:
    """Condition (a): the adapter's held-out loss is below the base model's."""
    return report.eval_loss_after < base_loss(report)


def preference_beats_base(report: PreferenceReport) -> tuple[bool, str]:
    """Condition (a) for a preference-tuned (DPO) adapter, and the sentence that says why:
    on at least :data:`MIN_PAIRS` held-out pairs, the low end of its preference accuracy's
    Wilson 95% interval is above the reference's 50% (the base model, or base + the SFT adapter
    it was trained on: the reference's implicit reward is 0 for every reply, so it ranks no
    pair: 50% by construction). Condition (b), paired runs
    of the spec, is the fine-tune loop's as for any adapter."""
    # With an SFT reference, the accuracy is against it (base + SFT), not the bare base model.
    ref, short = (
        ("the base model", "base")
        if report.reference_adapter is None
        else ("its SFT reference", "SFT reference")
    )
    measured = (
        f"held-out preference accuracy {report.accuracy:.3f}, 95% interval "
        f"[{report.accuracy_low:.3f}, {report.accuracy_high:.3f}], on {report.eval_pairs} "
        f"pair{'s' * (report.eval_pairs != 1)} vs 0.500 for {ref}; chosen ranked "
        f"higher per reply token: {short} {report.base_margin_accuracy:.3f}, adapter "
        f"{report.adapter_margin_accuracy:.3f} (paired {report.margin_diff:+.3f}, "
        f"[{report.margin_diff_low:+.3f}, {report.margin_diff_high:+.3f}])"
    )
    if report.eval_pairs < MIN_PAIRS:
        return False, (
            f"{measured}: fewer than {MIN_PAIRS} held-out pairs, so it cannot be verified; "
            "collect more episodes or hold out more (eval_share)"
        )
    if report.accuracy_low <= 0.5:
        return False, f"{measured}: the interval reaches 0.500, not above {ref}"
    return True, f"{measured}: above {ref}"


def heldout_beats_base(report: TrainReport | PreferenceReport) -> bool:
    """Condition (a) for either kind of adapter: :func:`beats_base` (supervised) or
    :func:`preference_beats_base` (DPO). Only an adapter that passes it gets paired runs."""
    if isinstance(report, PreferenceReport):
        return preference_beats_base(report)[0]
    return beats_base(report)


def judged_stages(plan: Plan) -> set[str]:
    """The stages whose replies a judge can see: some judge stage reads them, directly or
    through the stages between (``depends_on``, implied dependencies included), and that judge
    reads text — a ``simulate`` judge does not: it scores the declared latent quality of
    simulated outputs, and an adapter's replies come from a real local model, which has none
    (its score would be its own noise)."""
    by_id = {s.id: s for s in plan.stages}
    seen: set[str] = set()
    for judge in plan.stages:
        if judge.role is None or judge.role.type != "judge":
            continue
        tier = plan.tiers.get(judge.role.model_tier)
        if tier is None or tier.provider == "simulate":
            continue
        todo = list(judge.depends_on)
        while todo:
            sid = todo.pop()
            if sid in seen or sid not in by_id:
                continue
            seen.add(sid)
            todo.extend(by_id[sid].depends_on)
    return seen


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def heldout_inputs(
    examples: Sequence[Example],
    eval_share: float,
    inputs_of: Callable[[str], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """The distinct run inputs of the examples ``train_lora`` holds out (the same split), in
    the split's order, leaving out any that is also a training example's input (its prompt was
    trained on) and examples whose run has no recorded inputs. ``inputs_of(run_id)``."""
    if len(examples) < 2:
        return []
    train, held = split_examples(examples, eval_share)
    return _distinct_inputs([e.run_id for e in train], [e.run_id for e in held], inputs_of)


def preference_heldout_inputs(
    pairs: Sequence[PreferencePair],
    eval_share: float,
    inputs_of: Callable[[str], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """As :func:`heldout_inputs`, for the pairs ``train_dpo`` holds out (the same split, by
    prompt): the inputs of each held-out pair's runs — the chosen reply's, then the rejected
    one's (the stage was sent the same messages there, and failed or scored lower: what the
    adapter was trained to fix) — leaving out any that is also a training pair's run's input."""
    if len({json.dumps(p.prompt, sort_keys=True) for p in pairs}) < 2:
        return []  # train_dpo cannot split them either
    train, held = split_pairs(pairs, eval_share)
    return _distinct_inputs(
        [r for p in train for r in p.run_ids], [r for p in held for r in p.run_ids], inputs_of
    )


def _distinct_inputs(
    train_runs: Sequence[str],
    held_runs: Sequence[str],
    inputs_of: Callable[[str], dict[str, Any] | None],
) -> list[dict[str, Any]]:
    """The distinct recorded inputs of ``held_runs`` in order, none a ``train_runs`` input."""
    trained = {_key(v) for v in map(inputs_of, train_runs) if v is not None}
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for run_id in held_runs:
        value = inputs_of(run_id)
        if value is None:
            continue
        key = _key(value)
        if key in trained or key in seen:
            continue
        seen.add(key)
        out.append(value)
    return out


def with_adapter(plan: Plan, stage: str, base_model: str, adapter_dir: str) -> Plan:
    """``plan`` with ``stage`` served by a ``provider: local`` tier on ``base_model`` plus the
    adapter at ``adapter_dir``: what the paired runs with the adapter run.

    The tier copies the settings (temperature, max_tokens, params) of a local tier the spec
    already has on the same base model, else the stage's own tier's temperature and
    max_tokens. The stage neither escalates nor picks bandit arms (both would leave the
    adapter's tier), so a stage that escalates today is compared against itself escalating:
    conservative, never in the adapter's favour. The plan gets its own ``spec_hash``, so its
    runs never count as the spec's version.

    Raises:
        KeyError: no such stage; ValueError: it is not an LLM stage.
    """
    target = plan.stage(stage)
    if target.role is None:
        raise ValueError(f"stage {stage!r} of {plan.name!r} is not an LLM stage; it has no tier")
    own = plan.tiers.get(target.role.model_tier)
    template = next(
        (t for t in plan.tiers.values() if t.provider == "local" and t.model == base_model), None
    )
    name = f"{stage}+adapter"
    while name in plan.tiers:
        name += "'"
    source = template or own
    tier = ResolvedTier(
        name=name,
        provider="local",
        model=base_model,
        adapter=adapter_dir,
        temperature=source.temperature if source is not None else None,
        max_tokens=source.max_tokens if source is not None else None,
        params=dict(template.params) if template is not None else {},
    )
    role = target.role.model_copy(update={"model_tier": name})
    stages = [
        s.model_copy(update={"role": role, "escalate": False, "escalation_ladder": [], "arms": []})
        if s.id == stage
        else s
        for s in plan.stages
    ]
    digest = hashlib.sha256(f"{plan.spec_hash}+{stage}+{adapter_dir}".encode()).hexdigest()
    return plan.model_copy(
        update={"tiers": {**plan.tiers, name: tier}, "stages": stages, "spec_hash": digest}
    )


class Evidence(BaseModel):
    """One adapter's figures: its losses (or, preference-tuned, its ``preference`` report)
    and its paired runs' HQS (aligned; None: the run did not finish; both None: no paired runs
    were made), and whether a judge reads its stage (``judged``; else HQS cannot see what the
    adapter changes: :func:`judged_stages`)."""

    model_config = ConfigDict(frozen=True)

    base_loss: float | None = None
    heldout_loss: float | None = None
    eval_examples: int = 0
    preference: PreferenceReport | None = None
    without: list[float | None] | None = None
    with_adapter: list[float | None] | None = None
    judged: bool = True
    stage: str = "the stage"


class AdapterCheck(BaseModel):
    """The verdict on one adapter, the figures it keeps, and the sentence that says why."""

    model_config = ConfigDict(frozen=True)

    verdict: AdapterVerdict
    detail: str
    base_loss: float | None = None  # None: a preference-tuned adapter (no reply loss)
    heldout_loss: float | None = None
    paired_diff: float | None = None
    paired_ci_low: float | None = None  # unadjusted 95%
    paired_ci_high: float | None = None
    paired_n: int = 0
    adj_ci_low: float | None = None  # Holm-adjusted, when tested
    alpha_adj: float | None = None


def _pairs(e: Evidence) -> tuple[list[float], list[float]]:
    if e.without is None or e.with_adapter is None:
        return [], []
    kept = [
        (b, c)
        for b, c in zip(e.without, e.with_adapter, strict=True)
        if b is not None and c is not None
    ]
    return [b for b, _ in kept], [c for _, c in kept]


def _heldout(e: Evidence) -> tuple[bool, str, str]:
    """Condition (a): whether it holds, the figures, and the figures when it fails."""
    if e.preference is not None:
        passed, said = preference_beats_base(e.preference)
        return passed, said, said
    if e.heldout_loss is None or e.base_loss is None:
        raise ValueError(f"{e.stage}: evidence needs its losses or a preference report")
    loss = (
        f"held-out reply loss {e.heldout_loss:.3f} with the adapter vs {e.base_loss:.3f} for "
        f"the base model on {e.eval_examples} example{'s' * (e.eval_examples != 1)}"
    )
    return e.heldout_loss < e.base_loss, loss, f"{loss}: not below the base model's"


def decide_adapters(
    evidence: Sequence[Evidence], *, margin: float = DEFAULT_MARGIN
) -> list[AdapterCheck]:
    """Decide each adapter (results in the order given). The adapters that pass condition (a)
    and have :data:`MIN_PAIRS` scored pairs form one Holm family: non-inferiority tests with
    bound ``-margin``, and superiority tests (bound 0) for preference-tuned adapters."""
    pairs = [_pairs(e) for e in evidence]
    heldout = [_heldout(e) for e in evidence]
    tested = [
        i
        for i, ((passed, _, _), (bs, _)) in enumerate(zip(heldout, pairs, strict=True))
        if passed and len(bs) >= MIN_PAIRS
    ]
    bounds = [0.0 if evidence[i].preference is not None else -margin for i in tested]
    results = holm([[c - b for b, c in zip(*pairs[i], strict=True)] for i in tested], bounds)
    by_index = dict(zip(tested, results, strict=True))
    checks = []
    for i, e in enumerate(evidence):
        bs, cs = pairs[i]
        n = len(bs)
        diff, lo, hi = paired_verdict(bs, cs) if n else (None, None, None)
        passed, loss, failed = heldout[i]
        paired = (
            f"paired runs with − without it: HQS {diff:+.3f} on average over {n} pair"
            f"{'s' * (n != 1)}, 95% interval [{lo:+.3f}, {hi:+.3f}]"
            if diff is not None and lo is not None and hi is not None
            else ""
        )
        h = by_index.get(i)
        verdict: AdapterVerdict
        if not passed:
            verdict = "not_better"
            detail = failed
            if paired:
                detail += f"; {paired}"
        elif h is None:
            verdict = "insufficient_evidence"
            detail = (
                f"{loss}; {paired or 'no paired runs'}: fewer than {MIN_PAIRS} paired runs, so "
                "it cannot be verified; collect more runs or hold out more "
                "(finetune.eval_share)"
            )
        else:
            level = f"{100 * (1 - h.alpha_adj):.1f}%"
            interval = (
                f"Holm-adjusted {level} interval [{h.adj_ci_low:+.3f}, {h.adj_ci_high:+.3f}] "
                f"(rank {h.rank} of {h.m})"
            )
            held = " (Holm: an adapter with a smaller p-value already failed)" if h.blocked else ""
            if h.passed and not e.judged:
                verdict = "unmeasurable"
                detail = (
                    f"{loss}; {paired}; not verified: no judge that reads text reads "
                    f"{e.stage!r}, so HQS sees only whether its replies parse, not whether they "
                    "are any good (noise ties with the base model); add a judge stage after it "
                    "(role type judge, on a real model: a simulate judge cannot read an "
                    "adapter's replies) and run finetune again"
                )
            elif h.passed and e.preference is not None:
                verdict = "verified"
                detail = f"{loss}; {paired}; better: {interval} low end above 0"
            elif h.passed:
                verdict = "verified"
                detail = (
                    f"{loss}; {paired}; non-inferiority (margin {margin:g} HQS): {interval} "
                    f"low end above −{margin:g}"
                )
            elif e.preference is not None:
                verdict = "paired_not_better"
                detail = (
                    f"{loss}; {paired}; better (a preference-tuned adapter must raise HQS): "
                    f"{interval} reaches 0 or below: the spec is not shown better with it{held}"
                )
            else:
                verdict = "paired_worse"
                detail = (
                    f"{loss}; {paired}; non-inferiority (margin {margin:g} HQS): {interval} "
                    f"reaches −{margin:g} or below: the spec may score worse with it{held}"
                )
        checks.append(
            AdapterCheck(
                verdict=verdict,
                detail=detail,
                base_loss=e.base_loss,
                heldout_loss=e.heldout_loss,
                paired_diff=diff,
                paired_ci_low=lo,
                paired_ci_high=hi,
                paired_n=n,
                adj_ci_low=h.adj_ci_low if h is not None else None,
                alpha_adj=h.alpha_adj if h is not None else None,
            )
        )
    return checks
