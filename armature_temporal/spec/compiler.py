"""Compile a validated spec into a :class:`Plan`: the frozen, JSON-serialisable program that the
Temporal interpreter runs. Everything it needs is resolved here — tiers and role defaults, retry
and escalation policy, the judge contract, topological order, subagent plans inlined — so the
workflow never reads files. The same spec always compiles to byte-identical JSON. The Plan's
models live in :mod:`armature_temporal.spec.plan` and are importable from here.
"""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path
from typing import Any, Literal

from jinja2 import TemplateSyntaxError

from armature_temporal.spec.arm_policy import ArmPolicy
from armature_temporal.spec.checks import tier_names
from armature_temporal.spec.confidence import stage_min_confidence
from armature_temporal.spec.context_window import compile_context
from armature_temporal.spec.experience import compile_experience
from armature_temporal.spec.hashing import unused_newer_fields
from armature_temporal.spec.loader import LoadedSpec, load_spec
from armature_temporal.spec.models import (
    STANDARD_TIERS,
    SURFACE_GROUPS,
    Adapter,
    Arm,
    ModelTier,
    SelfImprovement,
    Spec,
    Stage,
)
from armature_temporal.spec.plan import (
    PLAN_FORMAT,
    Plan,
    PlanAdapter,
    PlanArm,
    PlanGate,
    PlanLoop,
    PlanReasoning,
    PlanRole,
    PlanStage,
    ResolvedTier,
    canonical_json,
)
from armature_temporal.spec.roles import DEFAULT_REASONING_PROMPT
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
    "knowledge_collection",
    "load_plan",
]

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

#: The simulate ladder when a spec declares no model_tiers: better tiers valid more, better.
DEFAULT_SIMULATE_TIERS: dict[str, dict[str, float]] = {
    "tiny": {"valid_rate": 0.85, "quality": 0.55},
    "small": {"valid_rate": 0.95, "quality": 0.7},
    "medium": {"valid_rate": 0.97, "quality": 0.78},
    "large": {"valid_rate": 0.99, "quality": 0.85},
    "frontier": {"valid_rate": 1.0, "quality": 0.92},
}


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
    from armature_temporal.mcp.pinning import pin_mcp  # lists MCP servers' tools: I/O

    mcp_servers, stages, rules = pin_mcp(loaded, stages, list(spec.safety_rules))
    contracts = spec.contracts
    # A field a spec leaves at its default stays out of both hashes (http_safe and a stage's
    # network are newer than most specs), so a spec that does not use it keeps its version and
    # policy version.
    unused = unused_newer_fields(spec)
    granted = sorted(s.id for s in stages if s.network)
    policy = {
        "http_allow_hosts": list(spec.http_allow_hosts),
        "safety_mode": spec.safety_mode,
        "safety_rules": [r.model_dump(mode="json") for r in spec.safety_rules],
        **(
            {"http_safe": [r.model_dump(mode="json") for r in spec.http_safe]}
            if spec.http_safe
            else {}
        ),
        # Which stages' programs may reach the network: part of what the policy allows.
        **({"network": granted} if granted else {}),
        # The MCP tools it applies to, as listed when planned.
        **(
            {"mcp": {t.canonical: t.hash for s in mcp_servers for t in s.tools}}
            if mcp_servers
            else {}
        ),
    }
    spec_hash = _sha256(
        {
            "spec": spec.model_dump(mode="json", exclude=unused),
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
        safety_rules=rules,
        http_allow_hosts=list(spec.http_allow_hosts),
        http_safe=list(spec.http_safe),
        sandbox_env=dict(spec.sandbox.env) if spec.sandbox is not None else {},
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
        mcp_servers=mcp_servers,
        knowledge_collection=knowledge_collection(spec) if spec.knowledge is not None else None,
    )


def knowledge_collection(spec: Spec) -> str:
    """The collection a spec's knowledge is indexed in: knowledge.collection, else its name."""
    return (spec.knowledge.collection if spec.knowledge else None) or spec.name


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
        role = role.model_copy(
            update={
                "context": compile_context(
                    spec.context,
                    stage.role.context,
                    has_tools=bool(stage.role.tools),
                    max_tokens=role.max_tokens
                    or (t.max_tokens if (t := spec.model_tiers.get(tier)) else None),
                ),
                "max_tokens_total": stage.role.max_tokens_total,
                "max_cost_usd": stage.role.max_cost_usd,
                "deadline_s": stage.role.deadline,
                "reasoning": _reasoning(
                    stage.role.reason_first,
                    stage.role.reasoning_tier,
                    stage.role.reasoning_prompt,
                    None,
                ),
            }
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
        reward_cost_per_1k_tokens=stage.reward_cost_per_1k_tokens,
        retry_until=retry.until if retry else None,
        adapter=_compile_adapter(stage.adapter, spec.adapters[stage.adapter])
        if stage.adapter is not None
        else None,
        partition_source=stage.partition_source,
        inject_file_as=stage.inject_file_as,
        isolated=stage.isolated,
        fail_as_value=stage.fail_as_value,
        block_below=stage.block_below,
        min_confidence=stage_min_confidence(spec, stage),
        output_max_chars=stage.output_max_chars
        or (contracts.output_max_chars if contracts else None),
        context_keys=list(stage.signature.input)
        if stage.signature is not None and stage.signature.input
        else None,
        context_never=sorted(never),
        evaluate=list(stage.evaluate),
        simulate=stage.simulate,
        cache=stage.cache,
        retrieve=stage.retrieve.model_copy(
            update={"collection": stage.retrieve.collection or knowledge_collection(spec)}
        )
        if stage.retrieve is not None
        else None,
        network=_network(spec, stage),
        bandit=_bandit(spec, stage, ladder),
    )


def _bandit(spec: Spec, stage: Stage, tier_ladder: list[str]) -> ArmPolicy | None:
    """The stage's ``bandit:`` with the refiner tier of prompt mutation resolved."""
    policy = stage.bandit
    if policy is None or policy.evolve is None or not policy.evolve.mutate_prompt:
        return policy
    si = spec.self_improvement
    tier = policy.evolve.refiner_tier or (si.refiner_tier if si is not None else None)
    tier = tier or (tier_ladder[-1] if tier_ladder else None)
    return policy.model_copy(
        update={"evolve": policy.evolve.model_copy(update={"refiner_tier": tier})}
    )


def _network(spec: Spec, stage: Stage) -> bool:
    """Whether the stage's tool programs get network: its own network:, else the spec's
    sandbox.allow_network."""
    if stage.network is not None:
        return stage.network
    return spec.sandbox is not None and spec.sandbox.allow_network


def _default_on_reject(spec: Spec, gate_id: str) -> Literal["stop", "continue"]:
    """A rejection stops the run unless a condition or skip_if reads the gate (as in 0.7.0)."""
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
    return None if stage.loop is None else PlanLoop(**stage.loop.model_dump())


def _compile_arm(arm: Arm, role: PlanRole) -> PlanArm:
    tier = arm.model_tier or role.model_tier
    return PlanArm(
        arm_id=arm.arm_id,
        model_tier=tier,
        params=dict(arm.params),
        prompt=arm.description or role.prompt,
        reasoning=_reasoning(
            arm.reason_first, arm.reasoning_tier, arm.reasoning_prompt, role.reasoning
        ),
    )


def _reasoning(
    on: bool | None,
    tier: str | None,
    prompt: str | None,
    inherited: PlanReasoning | None,
) -> PlanReasoning | None:
    """The private reasoning call of a ``reason_first`` role or arm: an arm's unset
    ``reason_first`` inherits the role's, and its unset tier and prompt the role's (then the
    attempt's tier and :data:`DEFAULT_REASONING_PROMPT`)."""
    if on is None:
        on = inherited is not None
    if not on:
        return None
    return PlanReasoning(
        tier=tier or (inherited.tier if inherited is not None else None),
        prompt=prompt or (inherited.prompt if inherited is not None else DEFAULT_REASONING_PROMPT),
    )
