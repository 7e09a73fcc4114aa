"""A frontier search's activities (workflows/improve_search.py): ``improve_reflect`` asks the
refiner for a child of a frontier member, shown the cases that member failed (GEPA's
reflection); ``improve_merge`` builds two members' merged changes into a candidate.

Both return a candidate relative to the *current* spec: its last change and its ancestry (the
parent's changes), the spec text with all of them, and the diff from the current text.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from temporalio import activity

from activities.improve import written_role_values
from armature_temporal.errors import SpecError
from armature_temporal.improve.edit import EditError, apply_changes, unified_diff
from armature_temporal.improve.models import Candidate, SpecChange
from armature_temporal.improve.refine import RefinerHistory, parse_reply, refiner_messages, screen
from armature_temporal.improve.search import Made, MergeInput, ReflectInput
from armature_temporal.runtime.llm import ProviderError, complete
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import LoadedSpec, load_spec_text

__all__ = ["improve_merge", "improve_reflect"]


def _built(spec_text: str, spec_path: str, changes: list[SpecChange]) -> tuple[str, LoadedSpec]:
    """The current spec with ``changes`` applied, and that text loaded."""
    base_dir = Path(spec_path).parent
    text = apply_changes(spec_text, changes, filename=spec_path, base_dir=base_dir)
    return text, load_spec_text(text, spec_path, base_dir=base_dir)


async def _reflect(inp: ReflectInput) -> Made:
    try:
        parent_text, loaded = _built(inp.spec_text, inp.spec_path, inp.parent)
        parent_plan = compile_spec(loaded)
    except (EditError, SpecError) as exc:
        return Made(notes=[f"the parent no longer builds: {exc}"])
    si = inp.plan.self_improvement
    assert si is not None
    messages = refiner_messages(
        parent_plan,
        inp.diagnosis,
        si.editable_surfaces,
        [],  # the parent has no production runs: its failing cases are its transcripts
        RefinerHistory(),
        inp.tried,
        1,
        failing=inp.failing,
    )
    try:
        answer = await complete(
            inp.plan.tiers[inp.refiner_tier],
            messages,
            seed=f"refiner/{parent_plan.spec_hash}",
            role_type="worker",
            output_mode="json",
            output_schema=None,
            temperature=0.2,
            # The simulator's refiner states a pitfall's lesson only when a failing case
            # shows the pitfall's symptom (runtime/simulate/_refiner.py).
            pitfalls=[p for s in inp.plan.stages if s.simulate for p in s.simulate.pitfalls],
        )
    except ProviderError as exc:
        return Made(notes=[f"the refiner (tier {inp.refiner_tier!r}) failed: {exc}"])
    parsed, notes = parse_reply(answer.text)
    kept, dropped = screen(
        parsed,
        spec_text=parent_text,
        spec_path=inp.spec_path,
        plan=parent_plan,
        surfaces=si.editable_surfaces,
        current=written_role_values(loaded.spec),
        history=RefinerHistory(rejected=list(inp.tried)),
        taken=[],
        k=1,
    )
    if not kept:
        return Made(notes=notes + dropped or ["the refiner proposed nothing new"])
    child = kept[0]
    ancestry = [c for c in inp.parent if c.surface != child.change.surface]
    return Made(
        candidate=child.model_copy(
            update={
                "ancestry": ancestry,
                "diff": unified_diff(inp.spec_text, child.spec_text, inp.spec_path),
            }
        ),
        notes=notes + dropped,
    )


@activity.defn(name="improve_reflect")
async def improve_reflect(inp: ReflectInput) -> Made:
    """One child of a frontier member, proposed by the refiner from the cases it failed."""
    return await _reflect(inp)


def _merge(inp: MergeInput) -> Made:
    if not inp.changes:
        return Made(notes=["nothing to merge"])
    try:
        text, loaded = _built(inp.spec_text, inp.spec_path, inp.changes)
        plan = compile_spec(loaded)
    except (EditError, SpecError) as exc:
        return Made(notes=[f"the merged changes do not build a valid spec: {exc}"])
    *ancestry, last = inp.changes
    return Made(
        candidate=Candidate(
            change=last,
            ancestry=ancestry,
            spec_text=text,
            plan=plan,
            diff=unified_diff(inp.spec_text, text, inp.spec_path),
        )
    )


@activity.defn(name="improve_merge")
async def improve_merge(inp: MergeInput) -> Made:
    """Two frontier members' changes, merged surface by surface, as one candidate."""
    return await asyncio.to_thread(_merge, inp)
