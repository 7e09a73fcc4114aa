"""Evolution of spec arms in bandit maintenance: admission of a bred arm (the prompt-input
scanner, then the spec validator with the arm added) and the refiner's prompt rewrite.

Called from the ``bandit_maintenance`` activity for each stage whose spec has
``bandit.evolve``; the breeding itself is :func:`armature_temporal.bandit.spec_arms.evolve`.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from activities.traces import store_for
from armature_temporal.bandit import BanditRuntime
from armature_temporal.bandit.spec_arms import EvolutionRound, evolve
from armature_temporal.errors import SpecError
from armature_temporal.improve.diagnose import diagnose
from armature_temporal.improve.refine import RefinerHistory, parse_reply, refiner_messages
from armature_temporal.runtime.bandit_models import SpecArms
from armature_temporal.runtime.llm import ProviderError, complete
from armature_temporal.scanner import scan
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.templating import referenced_names
from armature_temporal.store.engine import database_url
from armature_temporal.views import load_runs

__all__ = ["admit_arm", "evolve_stage"]

#: Runs of the spec the refiner reads (its worst transcripts come from them).
HISTORY = 200
_CHECK_ID = "bred_arm_check"


def _with_arm(spec_text: str, stage: str, arm: dict[str, Any]) -> str:
    """The spec text with ``arm`` appended to ``stage``'s arms (as a spec author writes it)."""
    yaml = YAML(typ="rt")
    doc = yaml.load(spec_text)
    for item in doc.get("stages") or []:
        if item.get("id") == stage:
            entry = {
                "arm_id": _CHECK_ID,
                "model_tier": arm.get("model_tier"),
                "params": dict(arm.get("params") or {}),
                "description": arm.get("prompt"),
            }
            reasoning = arm.get("reasoning")
            if reasoning:
                entry["reason_first"] = True
                entry["reasoning_prompt"] = reasoning.get("prompt")
                if reasoning.get("tier"):
                    entry["reasoning_tier"] = reasoning["tier"]
            item.setdefault("arms", []).append(entry)
            break
    else:
        raise ValueError(f"the spec has no stage {stage!r} any more")
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


def admit_arm(spec_arms: SpecArms, arm: dict[str, Any]) -> str | None:
    """Why a bred arm may not join the stage, or ``None`` to admit it.

    First the prompt-input scanner (an injected instruction, a secret, text aimed at a judge
    in the prompt refuses it), then the spec validator: the spec with the arm added must load
    and compile (its tier must exist, its template may read only what the stage may). Without
    the spec file, its template may read only names the spec's own arms read."""
    prompt = str(arm.get("prompt") or "")
    reasoning = arm.get("reasoning") or {}
    found = scan(f"{prompt}\n{reasoning.get('prompt') or ''}")
    if found.flagged:
        kinds = ", ".join(sorted(str(c) for c in found.categories()))
        return f"the prompt-input scanner flagged its prompt ({kinds})"
    path = Path(spec_arms.spec_path) if spec_arms.spec_path else None
    if path is not None and path.is_file():
        try:
            text = _with_arm(path.read_text(encoding="utf-8"), spec_arms.stage, arm)
            compile_spec(load_spec_text(text, str(path), base_dir=path.parent))
        except (SpecError, ValueError) as exc:
            return f"the spec would not validate with it: {str(exc)[:300]}"
        return None
    known: set[str] = set()
    for declared in spec_arms.arms:
        known |= set(referenced_names(str(declared.get("prompt") or "")))
    try:
        names = set(referenced_names(prompt))
    except Exception as exc:  # a template that does not parse
        return f"its prompt is not a valid template: {str(exc)[:200]}"
    if extra := sorted(names - known):
        return f"its prompt reads {extra}, which no declared arm of the stage reads"
    tiers = {str(a.get("model_tier")) for a in spec_arms.arms}
    if arm.get("model_tier") not in tiers:
        return f"its tier {arm.get('model_tier')!r} is not one of the stage's arms' {sorted(tiers)}"
    return None


def _rewrite(spec_arms: SpecArms, plan: Plan) -> str | None:
    """The refiner tier's rewrite of the stage's prompt from the spec's worst runs (the
    improvement loop's refiner, limited to this stage's description), or ``None``."""
    if spec_arms.refiner is None:
        return None
    tier = plan.tiers.get(str(spec_arms.refiner.get("name")))
    if tier is None:
        return None
    runs = load_runs(store_for(database_url()), spec=plan.name, limit=HISTORY)
    if not runs:
        return None
    surface = f"{spec_arms.stage}.description"
    diag = diagnose(plan, runs)
    messages = refiner_messages(plan, diag, [surface], runs, RefinerHistory(), [], 1)
    try:
        answer = asyncio.run(
            complete(
                tier,
                messages,
                seed=f"arm-refiner/{plan.spec_hash}/{len(runs)}",
                role_type="worker",
                output_mode="json",
                output_schema=None,
                temperature=0.2,
                pitfalls=[p for s in plan.stages if s.simulate for p in s.simulate.pitfalls],
            )
        )
    except ProviderError:
        return None
    proposals, _ = parse_reply(answer.text)
    for p in proposals:
        if p.stage == spec_arms.stage and p.surface == "description" and isinstance(p.value, str):
            return p.value
    return None


def evolve_stage(runtime: BanditRuntime, spec_arms: SpecArms) -> EvolutionRound:
    """One evolution round for the stage (blocking: run it in a thread)."""
    evo = spec_arms.policy.evolve
    assert evo is not None
    declared = {str(a["arm_id"]): a for a in spec_arms.arms}
    plan: Plan | None = None
    if evo.mutate_prompt and spec_arms.spec_path and Path(spec_arms.spec_path).is_file():
        path = Path(spec_arms.spec_path)
        try:
            text = path.read_text(encoding="utf-8")
            plan = compile_spec(load_spec_text(text, str(path), base_dir=path.parent))
        except SpecError:
            plan = None
    propose = None if plan is None else (lambda _parent: _rewrite(spec_arms, plan))
    return evolve(
        runtime, evo, declared, lambda arm: admit_arm(spec_arms, arm), propose_prompt=propose
    )
