"""Compile a validated spec into a :class:`Plan`: the frozen, JSON-serialisable program that the
Temporal interpreter runs. Everything it needs is resolved here — tiers and role defaults, retry
and escalation policy, the judge contract, topological order, subagent plans inlined — so the
workflow never reads files. The same spec always compiles to byte-identical JSON.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path
from typing import Any, Literal

from jinja2 import TemplateSyntaxError
from pydantic import BaseModel, ConfigDict, Field

from armature_temporal.spec.caching import StageCache
from armature_temporal.spec.checks import tier_names
from armature_temporal.spec.experience import ExperienceConfig, compile_experience
from armature_temporal.spec.loader import LoadedSpec, load_spec
from armature_temporal.spec.models import (
    STANDARD_TIERS,
    SURFACE_GROUPS,
    Adapter,
    Arm,
    Continuation,
    FinetuneConfig,
    MemoryConfig,
    ModelTier,
    OutputContract,
    SafetyRule,
    SelfImprovement,
    Spec,
    Stage,
    ToolCall,
    Trigger,
)
from armature_temporal.spec.simulation import StageSimulation
from armature_temporal.spec.templating import referenced_names, split_template_command

__all__ = [
    "DEFAULT_JUDGE_SCHEMA",
    "PLAN_FORMAT",
    "Plan",
    "PlanAdapter",
    "PlanArm",
    "PlanGate",
    "PlanLoop",
    "PlanRole",
    "PlanStage",
    "ResolvedTier",
    "canonical_json",
    "compile_spec",
    "load_plan",
]

#: Bumped when the Plan's shape changes incompatibly.
PLAN_FORMAT = 1

ROLE_TYPE_TIERS: dict[str, str] = {
    "worker": "small",
    "orchestrator": "frontier",
    "judge": "frontier",
    "researcher": "large",
}

DEFAULT_JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "rationale": {"type": "string"},
    },
    "required": ["score", "rationale"],
}

#: The simulate ladder for specs without model_tiers: each tier more often valid, of higher quality.
DEFAULT_SIMULATE_TIERS: dict[str, dict[str, float]] = {
    "tiny": {"valid_rate": 0.85, "quality": 0.55},
    "small": {"valid_rate": 0.95, "quality": 0.7},
    "medium": {"valid_rate": 0.97, "quality": 0.78},
    "large": {"valid_rate": 0.99, "quality": 0.85},
    "frontier": {"valid_rate": 1.0, "quality": 0.92},
}


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResolvedTier(_Frozen):
    """A tier with every default filled in."""

    name: str
    provider: str
    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    valid_rate: float = 1.0
    quality: float = 0.8
    latency_ms: float = 0.0
    adapter: str | None = None
    hedge_rate: float = 0.0
    logprobs: bool | None = None


class PlanRole(_Frozen):
    name: str
    type: Literal["worker", "orchestrator", "judge", "researcher"]
    prompt: str
    #: Plain text (not a template) added to the system message: context layers, skills and
    #: the signature's output keys.
    guidance: str = ""
    model_tier: str
    temperature: float | None = None
    max_tokens: int | None = None
    tools: list[str] = Field(default_factory=list)
    max_turns: int = 10


class PlanGate(_Frozen):
    message: str | None = None
    timeout_s: float | None = None
    on_timeout: Literal["approve", "reject", "fail"] = "fail"
    on_reject: Literal["stop", "continue"] = "stop"


class PlanLoop(_Frozen):
    max_iterations: int
    until: str | None = None
    #: None carries the whole output.
    carry_forward: list[str] | None = None
    iteration_var: str = "_iteration"
    backoff_s: float = 0.0
    backoff_max_s: float = 60.0


class PlanAdapter(_Frozen):
    """A script or Python function, run by the ``run_adapter`` activity."""

    name: str
    type: Literal["script", "python"]
    #: script: argv templates (or one command string when ``shell``).
    argv: list[str] = Field(default_factory=list)
    shell: bool = False
    fn: str | None = None
    args: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float = 60.0
    parse: Literal["json"] | None = None


class PlanArm(_Frozen):
    arm_id: str
    model_tier: str
    params: dict[str, Any] = Field(default_factory=dict)
    prompt: str


class PlanStage(_Frozen):
    """One stage, ready to execute. ``kind`` says which activity family runs it."""

    id: str
    kind: Literal["llm", "tool", "adapter", "fan_out", "gate"]
    depends_on: list[str] = Field(default_factory=list)
    #: The part of depends_on that templates implied (shown by ``armature plan``).
    implicit_depends_on: list[str] = Field(default_factory=list)
    role: PlanRole | None = None
    output_mode: Literal["text", "json", "guided_json"] = "text"
    output_schema: dict[str, Any] | None = None
    max_attempts: int = 1
    backoff_s: float = 0.0
    backoff_max_s: float | None = None
    escalate: bool = False
    escalation_ladder: list[str] = Field(default_factory=list)
    loop: PlanLoop | None = None
    gate: PlanGate | None = None
    tool: ToolCall | None = None
    fan_out: int | None = None
    fan_in: Literal["list", "merge", "first", "consensus"] | None = None
    partition_key: str | None = None
    post_run: bool = False
    condition: str | None = None
    skip_if: str | None = None
    timeout_s: float | None = None
    arms: list[PlanArm] = Field(default_factory=list)
    reward: Literal["auto", "external"] = "auto"
    retry_until: str | None = None
    adapter: PlanAdapter | None = None
    partition_source: str | None = None
    inject_file_as: str | None = None
    isolated: bool = False
    fail_as_value: bool = False
    block_below: float | None = None
    output_max_chars: int | None = None
    #: The context keys the stage sees (signature.input); None: all of its context.
    context_keys: list[str] | None = None
    #: Context keys it never sees (context_policy.never and layers' never).
    context_never: list[str] = Field(default_factory=list)
    evaluate: list[str] = Field(default_factory=list)
    simulate: StageSimulation | None = None  # the simulate provider's pitfalls
    cache: StageCache | None = None


class Plan(_Frozen):
    """The compiled workflow. ``stages`` is in topological order (ties keep spec order);
    post_run stages come last. ``children`` holds inlined subagent plans by stage id."""

    format: int = PLAN_FORMAT
    name: str
    version: str
    description: str = ""
    mission: str = ""
    spec_hash: str
    policy_version: str
    inputs_schema: dict[str, Any]
    tiers: dict[str, ResolvedTier]
    tier_ladder: list[str]
    stages: list[PlanStage]
    safety_mode: Literal["permissive", "strict"] = "permissive"
    safety_rules: list[SafetyRule] = Field(default_factory=list)
    http_allow_hosts: list[str] = Field(default_factory=list)
    continuation: Continuation | None = None
    triggers: list[Trigger] = Field(default_factory=list)
    self_improvement: SelfImprovement | None = None
    finetune: FinetuneConfig | None = None
    children: dict[str, Plan] = Field(default_factory=dict)
    max_llm_calls: int | None = None
    max_iterations: int | None = None
    #: Bound on the whole run (contracts.timeout_hours), seconds.
    run_timeout_s: float | None = None
    required_outputs: list[OutputContract] = Field(default_factory=list)
    completion: str | None = None
    memory: MemoryConfig | None = None
    #: The namespace memory is kept under (memory.workflow_name or the spec's name).
    memory_name: str | None = None
    experience: ExperienceConfig | None = None
    tool_modules: list[str] = Field(default_factory=list)
    hqs_weights: dict[str, float] | None = None
    #: Every field of the spec is durable on Temporal; 0.7.0's checkpoint: asked for it.
    checkpoint: bool = False

    def stage(self, stage_id: str) -> PlanStage:
        """The stage with this id; KeyError names the known ids."""
        for stage in self.stages:
            if stage.id == stage_id:
                return stage
        raise KeyError(
            f"no stage {stage_id!r} in plan {self.name!r}; stages: {[s.id for s in self.stages]}"
        )

    def to_json(self) -> str:
        """Canonical JSON: the same spec always gives the same bytes."""
        return canonical_json(self.model_dump(mode="json"))


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 text: the form hashes are taken over."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _sha256(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def load_plan(path: str | Path) -> Plan:
    """Load and compile a spec file (raises SpecError on any problem)."""
    return compile_spec(load_spec(path))


def compile_spec(loaded: LoadedSpec) -> Plan:
    """Compile a loaded spec (and its subagent specs) into a Plan."""
    spec = loaded.spec
    children = {sid: compile_spec(child) for sid, child in loaded.children.items()}
    source = Path(loaded.source)
    tiers = _resolve_tiers(spec, source.parent if source.is_file() else None)
    ladder = tier_names(spec)
    order = _topological_order(spec)
    stages = [
        _compile_stage(spec, spec_stage, ladder, loaded.implicit.get(spec_stage.id, []))
        for spec_stage in order
    ]
    contracts = spec.contracts
    policy = {
        "http_allow_hosts": list(spec.http_allow_hosts),
        "safety_mode": spec.safety_mode,
        "safety_rules": [r.model_dump(mode="json") for r in spec.safety_rules],
    }
    spec_hash = _sha256(
        {
            "spec": spec.model_dump(mode="json"),
            "children": {k: v.spec_hash for k, v in sorted(children.items())},
        }
    )
    return Plan(
        name=spec.name,
        version=spec.version,
        description=spec.description,
        mission=spec.mission,
        spec_hash=spec_hash,
        policy_version=_sha256(policy),
        inputs_schema=spec.inputs_schema,
        tiers=tiers,
        tier_ladder=ladder,
        stages=stages,
        safety_mode=spec.safety_mode,
        safety_rules=list(spec.safety_rules),
        http_allow_hosts=list(spec.http_allow_hosts),
        continuation=spec.continuation,
        triggers=list(spec.triggers),
        self_improvement=_self_improvement(spec),
        finetune=spec.finetune,
        children=children,
        max_llm_calls=contracts.max_llm_calls if contracts else None,
        max_iterations=contracts.max_iterations if contracts else None,
        run_timeout_s=contracts.timeout_hours * 3600
        if contracts and contracts.timeout_hours
        else None,
        required_outputs=list(contracts.outputs) if contracts else [],
        completion=contracts.completion if contracts else None,
        memory=spec.memory if spec.memory is not None and spec.memory.enabled else None,
        memory_name=(spec.memory.workflow_name or spec.name) if spec.memory else None,
        experience=compile_experience(spec.experience, ladder),
        tool_modules=[t.module for t in spec.tools],
        hqs_weights={str(k): v for k, v in spec.hqs.weights.items()}
        if spec.hqs is not None and spec.hqs.weights
        else None,
        checkpoint=spec.checkpoint,
    )


def _self_improvement(spec: Spec) -> SelfImprovement | None:
    """0.7.0 surface groups (descriptions, model_tiers) become stage.field surfaces."""
    si = spec.self_improvement
    if si is None or not any(s in SURFACE_GROUPS for s in si.editable_surfaces):
        return si
    surfaces: list[str] = []
    for surface in si.editable_surfaces:
        if surface not in SURFACE_GROUPS:
            surfaces.append(surface)
            continue
        for field in SURFACE_GROUPS[surface]:
            surfaces += [f"{s.id}.{field}" for s in spec.stages if s.role is not None]
    return si.model_copy(update={"editable_surfaces": list(dict.fromkeys(surfaces))})


def _resolve_tiers(spec: Spec, base_dir: Path | None = None) -> dict[str, ResolvedTier]:
    """Every tier with defaults filled in; a ``local`` tier's model and adapter directories
    relative to the spec's directory (``base_dir``) become absolute."""
    if spec.model_tiers:
        declared = spec.model_tiers
    else:
        declared = {
            name: ModelTier.model_validate({"provider": "simulate", **DEFAULT_SIMULATE_TIERS[name]})
            for name in STANDARD_TIERS
        }
    out = {}
    for name, tier in declared.items():
        values = tier.model_dump(
            exclude_none=True,
            exclude={"tool_calling", "adapter_support", "adapter_path_template"},
        )
        if tier.provider == "local" and base_dir is not None:
            for key in ("model", "adapter"):
                value = values.get(key)
                latest = key == "adapter" and (
                    value == "latest" or str(value).startswith("latest:")
                )
                if value and not latest and not Path(value).is_absolute():
                    values[key] = str((base_dir / value).resolve())
        out[name] = ResolvedTier(name=name, **values)
    return out


def _topological_order(spec: Spec) -> list[Stage]:
    """Kahn's algorithm; among ready stages, spec order wins. post_run stages go last."""
    main = [s for s in spec.stages if not s.post_run]
    position = {s.id: i for i, s in enumerate(main)}
    remaining = {s.id: set(s.depends_on) for s in main}
    done: list[Stage] = []
    while remaining:
        ready = sorted(
            (sid for sid, deps in remaining.items() if not deps), key=position.__getitem__
        )
        if not ready:  # the loader rejects cycles; this guards direct callers
            raise ValueError(f"dependency cycle among {sorted(remaining)}")
        sid = ready[0]
        done.append(main[position[sid]])
        del remaining[sid]
        for deps in remaining.values():
            deps.discard(sid)
    return done + [s for s in spec.stages if s.post_run]


def _compile_stage(
    spec: Spec, stage: Stage, ladder: list[str], implicit: list[str] | None = None
) -> PlanStage:
    role = None
    output_mode = stage.output_mode
    output_schema = stage.output_schema
    escalation: list[str] = []
    escalate = False
    if stage.role is not None:
        defaults = spec.role_type_defaults.get(stage.role.type)
        tier = (
            stage.role.model_tier
            or (defaults.model_tier if defaults else None)
            or _fallback_tier(ROLE_TYPE_TIERS[stage.role.type], ladder)
        )
        role = PlanRole(
            name=stage.role.name or stage.id.replace("_", " ").strip().capitalize() or stage.id,
            type=stage.role.type,
            prompt=stage.role.description,
            guidance=_guidance(spec, stage),
            model_tier=tier,
            temperature=stage.role.temperature
            if stage.role.temperature is not None
            else (defaults.temperature if defaults else None),
            max_tokens=stage.role.max_tokens
            if stage.role.max_tokens is not None
            else (defaults.max_tokens if defaults else None),
            tools=list(stage.role.tools),
            max_turns=stage.role.max_turns,
        )
        if stage.role.type == "judge" and output_schema is None:
            output_mode, output_schema = "json", DEFAULT_JUDGE_SCHEMA
        declared = stage.on_fail.escalate if stage.on_fail is not None else None
        # Escalation on schema failure is the default for guided_json (the design documents'
        # "without workflow author intervention"); elsewhere it is opt-in.
        escalate = declared if declared is not None else stage.output_mode == "guided_json"
        if escalate:
            escalation = ladder[ladder.index(tier) + 1 :] if tier in ladder else []
            escalate = bool(escalation) or declared is True
    retry = stage.on_fail.loop if stage.on_fail is not None else None
    kind: Literal["llm", "tool", "adapter", "fan_out", "gate"]
    if stage.role is not None:
        kind = "llm"
    elif stage.tool is not None:
        kind = "tool"
    elif stage.adapter is not None:
        kind = "adapter"
    elif stage.subagent_spec is not None:
        kind = "fan_out"
    else:
        kind = "gate"
    contracts = spec.contracts
    never = set(spec.context_policy.never if spec.context_policy else [])
    never |= set(stage.context_policy.never if stage.context_policy else [])
    for layer in spec.context_layers:
        never |= set(layer.never)
    has_items = stage.subagent_spec is not None or stage.partition_source is not None
    return PlanStage(
        id=stage.id,
        kind=kind,
        depends_on=list(stage.depends_on),
        implicit_depends_on=list(implicit or []),
        role=role,
        output_mode=output_mode,
        output_schema=output_schema,
        max_attempts=retry.max + 1 if retry else 1,
        backoff_s=retry.backoff_s if retry else 0.0,
        backoff_max_s=retry.backoff_max_s if retry else None,
        escalate=escalate,
        escalation_ladder=escalation,
        loop=_compile_loop(stage),
        gate=(
            PlanGate(
                message=stage.gate.message,
                timeout_s=stage.gate.timeout,
                on_timeout=stage.gate.on_timeout,
                on_reject=stage.gate.on_reject or _default_on_reject(spec, stage.id),
            )
            if stage.gate is not None
            else None
        ),
        tool=stage.tool,
        fan_out=(stage.fan_out or (20 if stage.partition_source else 1)) if has_items else None,
        fan_in=(stage.fan_in or "list") if has_items else None,
        partition_key=stage.partition_key,
        post_run=stage.post_run,
        condition=stage.condition,
        skip_if=stage.skip_if,
        timeout_s=stage.timeout_s,
        arms=[_compile_arm(arm, role) for arm in stage.arms] if role is not None else [],
        reward=stage.reward,
        retry_until=retry.until if retry else None,
        adapter=_compile_adapter(stage.adapter, spec.adapters[stage.adapter])
        if stage.adapter is not None
        else None,
        partition_source=stage.partition_source,
        inject_file_as=stage.inject_file_as,
        isolated=stage.isolated,
        fail_as_value=stage.fail_as_value,
        block_below=stage.block_below,
        output_max_chars=stage.output_max_chars
        or (contracts.output_max_chars if contracts else None),
        context_keys=list(stage.signature.input)
        if stage.signature is not None and stage.signature.input
        else None,
        context_never=sorted(never),
        evaluate=list(stage.evaluate),
        simulate=stage.simulate,
        cache=stage.cache,
    )


def _default_on_reject(spec: Spec, gate_id: str) -> Literal["stop", "continue"]:
    """A gate whose decision some condition or skip_if branches on lets the run continue
    after a rejection (as in 0.7.0); otherwise a rejection stops the run."""
    for other in spec.stages:
        for expr in (other.condition, other.skip_if):
            if expr is None:
                continue
            try:
                if gate_id in referenced_names(expr, expression=True):
                    return "continue"
            except TemplateSyntaxError:
                continue
    return "stop"


def _guidance(spec: Spec, stage: Stage) -> str:
    """Context layers, skills and the signature's output keys, as plain prompt text."""
    parts: list[str] = []
    must = list(spec.context_policy.must if spec.context_policy else [])
    must += [
        m for m in (stage.context_policy.must if stage.context_policy else []) if m not in must
    ]
    layers = sorted(
        (layer for layer in spec.context_layers if layer.name in must),
        key=lambda layer: -layer.precedence,
    )
    for layer in layers:
        if layer.content:
            parts.append(f"[Context layer: {layer.name}]\n{layer.content.strip()}")
    assert stage.role is not None
    for skill_id in stage.role.skills:
        skill = spec.skill_library.get(skill_id)
        if skill is not None and skill.content:
            heading = skill.description or skill_id
            parts.append(f"Skill — {heading}:\n{skill.content.strip()}")
    if stage.signature is not None and stage.signature.output:
        lines = [
            f"- {key}: {meaning}" if meaning else f"- {key}"
            for key, meaning in stage.signature.output.items()
        ]
        parts.append("Your output provides:\n" + "\n".join(lines))
    return "\n\n".join(parts)


def _compile_adapter(name: str, adapter: Adapter) -> PlanAdapter:
    argv: list[str] = []
    if adapter.type == "script":
        if adapter.shell:
            argv = [adapter.cmd if isinstance(adapter.cmd, str) else shlex.join(adapter.cmd or [])]
        elif isinstance(adapter.cmd, str):
            argv = split_template_command(adapter.cmd)
        else:
            argv = list(adapter.cmd or [])
    return PlanAdapter(
        name=adapter.name or name,
        type=adapter.type,
        argv=argv,
        shell=adapter.shell,
        fn=adapter.fn,
        args=dict(adapter.args),
        timeout_s=adapter.timeout,
        parse=adapter.parse,
    )


def _fallback_tier(preferred: str, ladder: list[str]) -> str:
    """The role type's standard tier, or the nearest tier the spec has."""
    if preferred in ladder:
        return preferred
    rank = STANDARD_TIERS.index(preferred)
    standard = [t for t in ladder if t in STANDARD_TIERS]
    if standard:
        return min(
            standard, key=lambda t: (abs(STANDARD_TIERS.index(t) - rank), -STANDARD_TIERS.index(t))
        )
    # Custom tier names only: worker takes the smallest, the others the largest.
    return ladder[0] if preferred in ("tiny", "small") else ladder[-1]


def _compile_loop(stage: Stage) -> PlanLoop | None:
    if stage.loop is None:
        return None
    return PlanLoop(**stage.loop.model_dump())


def _compile_arm(arm: Arm, role: PlanRole) -> PlanArm:
    return PlanArm(
        arm_id=arm.arm_id,
        model_tier=arm.model_tier or role.model_tier,
        params=dict(arm.params),
        prompt=arm.description or role.prompt,
    )
