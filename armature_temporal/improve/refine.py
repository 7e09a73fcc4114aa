"""The LLM refiner: a model on one of the spec's tiers proposes changes beside the rules.

:func:`refiner_messages` writes its prompt: the diagnosis (each LLM stage's figures and the
failure codes), the editable surfaces with their current values, transcripts of the worst runs
(bounded), the improvement history (verified fixes, missed predictions, rejected proposals:
never propose those again) and the rule-based candidates already in the round. It answers one
JSON object, ``{"proposals": [{surface, stage, value, rationale, predicted_fixes,
predicted_regressions}, ...]}``, read strictly by :func:`parse_reply`. :func:`screen` keeps
what may be verified: an editable surface of an LLM stage, a value of the field's type that
differs from the current one, text that passes the prompt-input scanner, a spec that still
validates and compiles with it, nothing equal to a rejected change in the history or to a
rule-based candidate, at most one per (stage, field) and distinct fields first, at most K.

A ``simulate`` tier answers the prompt offline (it carries the simulator's
``REFINER_MARKER`` and its facts block; see runtime/simulate/_refiner.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from armature_temporal.errors import SpecError
from armature_temporal.improve.cases import FailingCase
from armature_temporal.improve.edit import EditError, apply_changes, unified_diff
from armature_temporal.improve.models import (
    Candidate,
    Diagnosis,
    EditableField,
    Proposal,
    SpecChange,
)
from armature_temporal.improve.predict import failures
from armature_temporal.runtime.simulate import REFINER_MARKER
from armature_temporal.runtime.simulate._refiner import FACTS_CLOSE, FACTS_OPEN
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.views.report import RunTrace

__all__ = [
    "FAILURE_KINDS",
    "RefinerHistory",
    "RefinerProposal",
    "history_of",
    "parse_reply",
    "refiner_messages",
    "screen",
    "transcripts",
]

#: The failure kinds a prediction may name (``kind:stage``; see improve/predict.py).
FAILURE_KINDS = (
    "output_invalid",
    "escalated",
    "stage_failed",
    "low_confidence",
    "truncated",
    "low_judge",
)
WORST_RUNS = 5  # runs whose transcripts the prompt shows
FIELD_CHARS = 300  # of each stage output or error shown
MAX_DESCRIPTION = 8000  # characters a proposed description may have
AVOID_SHOWN = 50  # rejected changes the prompt lists
SYSTEM = (
    f"{REFINER_MARKER} You improve an agent workflow spec. From the diagnosis, the transcripts "
    "of failing runs and the improvement history, propose single changes to the editable "
    'surfaces. Reply with one JSON object and nothing else: {"proposals": [{"surface": '
    'one of description|model_tier|temperature|max_tokens, "stage": a stage id, "value": '
    'the new value, "rationale": one sentence, "predicted_fixes": ["kind:stage", ...], '
    '"predicted_regressions": ["kind:stage", ...]}]}. Failure kinds: '
    + ", ".join(FAILURE_KINDS)
    + ". Never propose a change listed as rejected or already proposed. Propose at most K "
    "changes, each on a different surface where you can."
)


class RefinerProposal(BaseModel):
    """One proposal as the refiner must write it (strict: no coercion, no extra keys)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    surface: EditableField
    stage: StrictStr = Field(min_length=1, max_length=200)
    value: StrictStr | StrictInt | StrictFloat
    rationale: StrictStr = Field(min_length=1, max_length=2000)
    predicted_fixes: list[StrictStr] = Field(default_factory=list, max_length=20)
    predicted_regressions: list[StrictStr] = Field(default_factory=list, max_length=20)


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    proposals: list[dict[str, Any]] = Field(max_length=20)


class RefinerHistory(BaseModel):
    """What the store says the loop has learnt about a spec so far."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verified_fixes: list[str] = Field(default_factory=list)
    missed_predictions: list[str] = Field(default_factory=list)
    rejected: list[SpecChange] = Field(default_factory=list)  # not verified, or dismissed


def history_of(
    proposals: Sequence[Proposal], verified_fixes: Sequence[str], missed: Sequence[str]
) -> RefinerHistory:
    """The history from a spec's stored proposals and rounds: a proposal that did not verify
    or that a person dismissed is rejected (each of its changes)."""
    rejected: list[SpecChange] = []
    for p in proposals:
        if p.verdict != "verified" or p.status == "dismissed":
            rejected.extend(p.changes)
    return RefinerHistory(
        verified_fixes=sorted(set(verified_fixes)),
        missed_predictions=sorted(set(missed)),
        rejected=rejected,
    )


def _cut(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + "...[truncated]"


def transcripts(plan: Plan, runs: Sequence[RunTrace], *, worst: int = WORST_RUNS) -> str:
    """The worst ``worst`` finished runs of ``plan``'s version (lowest HQS, unscored first),
    each stage's status, error and output, every value cut to :data:`FIELD_CHARS`."""
    mine = [
        r
        for r in runs
        if r.spec_hash == plan.spec_hash and not r.verification and r.finished_at is not None
    ]
    mine.sort(key=lambda r: (r.hqs is not None, r.hqs or 0.0, r.run_id))
    blocks: list[str] = []
    for run in mine[:worst]:
        hqs = "—" if run.hqs is None else f"{run.hqs:.3f}"
        lines = [f"run {run.run_id}: {run.status}, HQS {hqs}"]
        for r in run.records:
            if r.kind != "stage" or r.stage_id is None:
                continue
            line = f"  {r.stage_id} [{r.tier or '-'}] {r.status}"
            if r.error_type or r.error:
                line += f" error {r.error_type or ''}: {_cut(r.error or '')}"
            if r.output is not None:
                line += f" output: {_cut(r.output)}"
            lines.append(line)
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) or "(no finished runs)"


def _surfaces(plan: Plan, surfaces: Sequence[str]) -> dict[str, Any]:
    """Each editable surface and its value now (a role's own, else its tier's)."""
    out: dict[str, Any] = {}
    for surface in surfaces:
        sid, _, field = surface.partition(".")
        stage = next((s for s in plan.stages if s.id == sid), None)
        if stage is None or stage.role is None:
            continue
        if field == "description":
            out[surface] = stage.role.prompt
        elif field == "model_tier":
            out[surface] = stage.role.model_tier
        else:
            value = getattr(stage.role, field, None)
            tier = plan.tiers.get(stage.role.model_tier)
            out[surface] = value if value is not None else getattr(tier, field, None)
    return out


def refiner_messages(
    plan: Plan,
    diagnosis: Diagnosis,
    surfaces: Sequence[str],
    runs: Sequence[RunTrace],
    history: RefinerHistory,
    taken: Sequence[SpecChange],
    k: int,
    failing: Sequence[FailingCase] = (),
) -> list[dict[str, str]]:
    """The refiner's prompt (system + user). ``taken``: the round's rule-based candidates
    (or, in a frontier search, every change tried so far). ``failing``: the spec's cases that
    ``plan`` failed, as GEPA's reflection is shown them: each case's inputs, the answer it gave
    and the failing assertion's reason (a judge's rationale for an llm-rubric)."""
    modes = {s.id: s.output_mode for s in plan.stages}
    facts = {
        "k": k,
        "ladder": list(plan.tier_ladder),
        "surfaces": _surfaces(plan, surfaces),
        "stages": [
            {**s.model_dump(mode="json"), "output_mode": modes.get(s.stage)}
            for s in diagnosis.stages
        ],
        "failures": sorted(failures(diagnosis)),
        # The newest rejections (the screen checks them all), and the rules' candidates.
        "avoid": [[c.stage, c.field, c.new] for c in [*history.rejected[:AVOID_SHOWN], *taken]],
    }
    if failing:
        facts["failing_cases"] = [f.model_dump(mode="json", exclude={"run_id"}) for f in failing]
    user = "\n\n".join(
        [
            f"Spec {plan.name!r}, {diagnosis.runs} runs, mean HQS {diagnosis.mean_hqs}. K = {k}.",
            f"Diagnosis and surfaces:\n{FACTS_OPEN}{json.dumps(facts, default=str)}{FACTS_CLOSE}",
            f"Worst runs:\n{transcripts(plan, runs)}",
            *([_failing_block(failing)] if failing else []),
            "History: verified fixes "
            + json.dumps(history.verified_fixes)
            + "; missed predictions "
            + json.dumps(history.missed_predictions)
            + ". Rejected and already-proposed changes are the `avoid` list above.",
        ]
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _failing_block(failing: Sequence[FailingCase]) -> str:
    """The failing cases as the prompt shows them, one block each."""
    blocks = [
        f"case {f.case} {f.description!r}: inputs {_cut(f.vars)}\n"
        f"  answer of {f.stage or 'the run'}: {_cut(f.output)}\n"
        f"  failed {f.assertion or 'the run'}: {_cut(f.reason)}"
        for f in failing
    ]
    return "Failing cases (propose a change that makes these pass):\n" + "\n".join(blocks)


def parse_reply(text: str) -> tuple[list[RefinerProposal], list[str]]:
    """The proposals in the refiner's reply, and a note per item dropped (or for the whole
    reply when it is not the JSON object asked for). Items are validated one by one."""
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`").removeprefix("json").strip()
    try:
        reply = _Reply.model_validate(json.loads(body))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0][:200]
        return [], [f'refiner reply is not {{"proposals": [...]}} JSON: {first}']
    kept: list[RefinerProposal] = []
    notes: list[str] = []
    for i, item in enumerate(reply.proposals):
        try:
            kept.append(RefinerProposal.model_validate(item))
        except ValidationError as exc:
            where = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or 'item'}: {e['msg']}" for e in exc.errors()
            )
            notes.append(f"refiner proposal {i + 1} dropped: {where[:300]}")
    return kept, notes


def _key(stage: str, field: str, value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = float(value)
    return json.dumps([stage, field, value])


def _typed(field: str, value: Any) -> str | None:
    """Why ``value`` cannot be ``field``'s (None: it can)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if field in ("description", "model_tier") and not isinstance(value, str):
        return f"{field} takes text, got {value!r}"
    if field == "description" and not (len(value.strip()) > 0 and len(value) <= MAX_DESCRIPTION):
        return f"a description must be 1 to {MAX_DESCRIPTION} characters"
    if field == "temperature" and not (number and 0 <= value <= 2):
        return f"temperature takes a number from 0 to 2, got {value!r}"
    if field == "max_tokens" and not (isinstance(value, int) and value >= 1 and number):
        return f"max_tokens takes a whole number above 0, got {value!r}"
    return None


def _codes(codes: Sequence[str], stages: set[str]) -> list[str]:
    """Only well-formed failure codes on stages of the spec."""
    ok = []
    for code in codes:
        kind, _, stage = code.partition(":")
        if kind in FAILURE_KINDS and stage in stages:
            ok.append(code)
    return sorted(set(ok))


def screen(
    proposals: Sequence[RefinerProposal],
    *,
    spec_text: str,
    spec_path: str,
    plan: Plan,
    surfaces: Sequence[str],
    current: dict[str, dict[str, object]],
    history: RefinerHistory,
    taken: Sequence[SpecChange],
    k: int,
) -> tuple[list[Candidate], list[str]]:
    """The refiner proposals that may be verified, as candidates (at most ``k``, at most one
    per (stage, field), distinct fields first), and a note for each one dropped.

    ``current``: the values written in the spec text now (``written_role_values``), which a
    change records as ``old``. ``taken``: the round's rule-based candidates.
    """
    from armature_temporal.scanner import scan

    allowed = set(surfaces)
    now = _surfaces(plan, surfaces)
    refused = {_key(c.stage, c.field, c.new) for c in history.rejected}
    duplicate = {_key(c.stage, c.field, c.new) for c in taken}
    stages = {s.id for s in plan.stages}
    base_dir = Path(spec_path).parent if spec_path else None
    ok: list[Candidate] = []
    notes: list[str] = []
    seen: set[str] = set()
    for p in proposals:
        surface = f"{p.stage}.{p.surface}"
        key = _key(p.stage, p.surface, p.value)

        def drop(why: str, surface: str = surface, value: object = p.value) -> None:
            notes.append(f"refiner proposal {surface} = {value!r:.60} dropped: {why}")

        if surface not in allowed:
            drop(f"not an editable surface; self_improvement.editable_surfaces: {sorted(allowed)}")
            continue
        if p.surface == "sources":
            drop(
                "knowledge.sources grows by enrichment, from knowledge.candidates, not the refiner"
            )
            continue
        if (why := _typed(p.surface, p.value)) is not None:
            drop(why)
            continue
        if surface in now and _key(p.stage, p.surface, now[surface]) == key:
            drop("it is the value the spec has now")
            continue
        if key in refused:
            drop("the improvement history rejected this change before")
            continue
        if key in duplicate:
            drop("a rule-based candidate of this round makes the same change")
            continue
        if surface in seen:
            drop("another refiner proposal of this round changes the same stage field")
            continue
        if isinstance(p.value, str) and (found := scan(p.value)).flagged:
            kinds = sorted(str(c) for c in found.categories())
            drop(f"the prompt-input scanner flagged its text ({', '.join(kinds)})")
            continue
        change = SpecChange(
            stage=p.stage,
            field=p.surface,
            old=current.get(p.stage, {}).get(p.surface),
            new=p.value,
            why=p.rationale,
            origin="refiner",
        )
        try:
            text = apply_changes(
                spec_text, [change], filename=spec_path or "<spec>", base_dir=base_dir
            )
            new_plan = compile_spec(load_spec_text(text, spec_path or "<spec>", base_dir=base_dir))
        except (EditError, SpecError) as exc:
            drop(f"the spec would not validate and compile with it: {str(exc)[:300]}")
            continue
        seen.add(surface)
        ok.append(
            Candidate(
                change=change,
                spec_text=text,
                plan=new_plan,
                diff=unified_diff(spec_text, text, spec_path or "<spec>"),
                predicted_fixes=_codes(p.predicted_fixes, stages),
                predicted_regressions=_codes(p.predicted_regressions, stages),
            )
        )
    # Diverse by surface: one per distinct field first (in the refiner's order), then the rest.
    fields: set[str] = set()
    first: list[Candidate] = []
    rest: list[Candidate] = []
    for c in ok:
        (rest if c.change.field in fields else first).append(c)
        fields.add(c.change.field)
    chosen = (first + rest)[:k]
    for c in (first + rest)[k:]:
        notes.append(f"refiner proposal {c.change.surface} left out: K = {k} per round")
    return [c for c in ok if c in chosen], notes
