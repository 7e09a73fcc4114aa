"""What ``armature validate`` warns about: problems that do not stop a run (exit 0) — run inputs
read but not declared, tools nothing is known to register, fields read from outputs that lack
them, and armature-agents 0.7.0 fields accepted but not used here (each with its replacement).
"""

from __future__ import annotations

from collections.abc import Iterator

from jinja2 import TemplateSyntaxError

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.checks import JUDGE_SCORE_KEYS, tier_names
from armature_temporal.spec.grants import grant_warnings
from armature_temporal.spec.models import SURFACE_GROUPS, Spec
from armature_temporal.spec.references import (
    MARKER_FIELDS,
    POST_RUN_VARIABLES,
    RUN_VARIABLES,
    Path,
    Problem,
    _declares_inputs,
    _input_names,
    _optional_input_warnings,
    _output_fields,
    absent_name_warnings,
    stage_templates,
)
from armature_temporal.spec.templating import referenced_names
from armature_temporal.spec.tool_checks import BUILTIN_TOOLS, PY_TOOL, tool_problem

__all__ = ["spec_warnings"]


def _unregistered_tools(spec: Spec) -> Iterator[Problem]:
    """Tool names that are neither built in nor module:function: a tools: module may register
    them when the worker loads it, so validate warns instead of refusing."""
    hint = (
        " — unless a tools: module registers it"
        if spec.tools
        else "; if a Python module provides it, list the module under tools: [{module: ...}]"
    )
    if spec.mcp_servers:  # planning lists the servers' tools: it refuses a name none lists
        return
    for i, stage in enumerate(spec.stages):
        if stage.role is not None:
            for k, tool in enumerate(stage.role.tools):
                if msg := tool_problem(tool):
                    yield ("stages", i, "role", "tools", k), msg + hint
        if stage.tool is not None and (msg := tool_problem(stage.tool.name)):
            yield ("stages", i, "tool", "name"), msg + hint


#: 0.7.0 top-level fields that are accepted but not acted on here, and what to use instead.
_ACCEPTED_ONLY: dict[str, str] = {
    "roles": "a role library used by 0.7.0's export; give each stage its role inline",
    "failures": "documentation in 0.7.0; on_fail and fail_as_value handle failures",
    "file_state": "stages share data through their outputs; use file_read/file_write tools",
    "trace": "every run is traced, always (armature report RUN, armature traces verify)",
    "adapter_factory": "use finetune: (armature finetune) to train LoRA adapters",
    "destinations": "read outputs with armature status --json / armature run --output",
    "closure": "missions are not part of this engine",
}


def _field_read_warnings(spec: Spec) -> Iterator[Problem]:
    """Fields read from outputs whose shape is fixed without a schema: a text stage gives
    {content}, a judge without output_schema {score, rationale}, a bare gate its decision.
    0.7.0 rendered such a read as empty text, and so does this engine; it is usually a stage
    that should declare output_mode: json with an output_schema."""
    stages = {s.id: s for s in spec.stages}
    for i in range(len(spec.stages)):
        for path, source, is_expr, extra in stage_templates(spec, i):
            try:
                names = referenced_names(source, expression=is_expr)
            except TemplateSyntaxError:
                continue
            for name, attrs in sorted(names.items()):
                other = stages.get(name)
                if other is None or name in extra or other.output_schema is not None:
                    continue
                fields = _output_fields(other)
                if fields is None or other.partition_source is not None:
                    continue
                for attr in sorted(attrs - set(fields) - set(MARKER_FIELDS)):
                    yield (
                        path,
                        f"stage {name!r} outputs only {fields}, so {name}.{attr} is empty; "
                        f"give {name!r} output_mode: json and an output_schema with {attr!r}",
                    )


def _shape_warnings(spec: Spec) -> Iterator[Problem]:
    """Rules for tools nothing provides, judges that give no score, loop fields an output
    lacks, role-type defaults naming absent tiers: 0.7.0 accepted them silently, and each
    does nothing, so validate says so."""
    provided = set(BUILTIN_TOOLS) | set(spec.adapters)
    for r, rule in enumerate(spec.safety_rules):
        if rule.tool == "*" or rule.tool in provided or spec.tools or PY_TOOL.match(rule.tool):
            continue
        if spec.mcp_servers:  # planning resolves it against the servers' tools, or refuses it
            continue
        yield (
            ("safety_rules", r, "tool"),
            f"no tool or adapter named {rule.tool!r} exists here, so this rule never applies; "
            f"tools: {sorted(provided)}{did_you_mean(rule.tool, sorted(provided))}",
        )
    tiers = tier_names(spec)
    for rtype, default in spec.role_type_defaults.items():
        used = any(
            s.role is not None and s.role.type == rtype and s.role.model_tier is None
            for s in spec.stages
        )
        if default.model_tier is not None and default.model_tier not in tiers and not used:
            yield (
                ("role_type_defaults", rtype, "model_tier"),
                f"tier {default.model_tier!r} is not defined (no {rtype} stage uses this "
                f"default yet); tiers: {tiers}",
            )
    for i, stage in enumerate(spec.stages):
        schema = stage.output_schema
        if stage.role is not None and stage.role.type == "judge" and schema is not None:
            props = schema.get("properties", {})
            if not isinstance(props, dict) or not any(k in props for k in JUDGE_SCORE_KEYS):
                yield (
                    ("stages", i, "output_schema"),
                    "this judge's output has no score, quality_score or confidence, so it gives "
                    "HQS, bandit rewards and block_below no score; add one (a number in [0, 1])",
                )
        if stage.loop is not None and stage.loop.carry_forward:
            fields = _output_fields(stage)
            for k, field in enumerate(stage.loop.carry_forward):
                root = field.split(".", 1)[0]
                if fields is not None and root not in fields:
                    yield (
                        ("stages", i, "loop", "carry_forward", k),
                        f"the output has no field {root!r}, so {field!r} carries nothing; "
                        f"its fields: {fields}{did_you_mean(root, fields)}",
                    )
        on_fail = stage.on_fail
        escalates = on_fail.escalate if on_fail and on_fail.escalate is not None else None
        if escalates is None:  # the compiler's default: guided_json escalates
            escalates = stage.output_mode == "guided_json"
        retries = escalates or (on_fail is not None and on_fail.loop is not None)
        if stage.min_confidence is not None and not retries:
            yield (
                ("stages", i, "min_confidence"),
                "this stage neither retries (on_fail.loop) nor escalates (on_fail.escalate), so "
                "an output refused for low confidence stands anyway; add on_fail: "
                "{escalate: true}",
            )
    by_id = {s.id: s for s in spec.stages}
    for k, cap in enumerate(spec.memory.capture if spec.memory is not None else []):
        other = by_id.get(cap.stage)
        if other is None or other.output_schema is not None:
            continue
        fields = _output_fields(other)
        if fields is not None and cap.key not in fields:
            yield (
                ("memory", "capture", k, "key"),
                f"stage {cap.stage!r} outputs only {fields}, so {cap.key!r} is never "
                "captured; give it output_mode: json and an output_schema",
            )


def _http_reversibility_warnings(spec: Spec) -> Iterator[Problem]:
    """A rule on ``_tool_reversibility`` that reaches http_request in a spec that marks no
    request safe: every request is ``none`` now (a GET was ``full`` before http_safe)."""
    uses_http = any(
        (st.role is not None and "http_request" in st.role.tools)
        or (st.tool is not None and st.tool.name == "http_request")
        for st in spec.stages
    )
    if not uses_http or spec.http_safe:
        return
    for k, rule in enumerate(spec.safety_rules):
        on_it = rule.condition is not None and rule.condition.field == "_tool_reversibility"
        if on_it and rule.tool in ("*", "http_request"):
            yield (
                ("safety_rules", k, "condition"),
                "every http_request call is reversibility 'none' here (a GET too: its URL "
                "carries data out), since the spec marks no request safe; for requests that "
                "change nothing, add e.g. http_safe: [{host: api.example.com, methods: [GET]}]",
            )


def spec_warnings(spec: Spec) -> list[Problem]:
    """What deserves a look but does not stop a run (validate prints them and exits 0)."""
    warnings: list[Problem] = []
    warnings += _bare_input_warnings(spec)
    warnings += _optional_input_warnings(spec)
    warnings += absent_name_warnings(spec)
    warnings += _field_read_warnings(spec)
    warnings += _shape_warnings(spec)
    warnings += _unregistered_tools(spec)
    warnings += _http_reversibility_warnings(spec)
    for key, instead in _ACCEPTED_ONLY.items():
        value = getattr(spec, key)
        if value:
            warnings.append(
                ((key,), f"accepted from armature-agents 0.7.0 but not used: {instead}")
            )
    if spec.sandbox is not None:
        for key in spec.sandbox.unused:
            warnings.append(
                (
                    ("sandbox", key),
                    "accepted from armature-agents 0.7.0 but not used: tool programs run in "
                    "Armature's own sandbox, a restricted subprocess with no secrets and no "
                    "network unless granted, not in Docker (README: Where tools run); "
                    "sandbox.allow_network and sandbox.env act",
                )
            )
    warnings += grant_warnings(spec)
    if spec.mission_source != "static":
        warnings.append(
            (("mission_source",), "missions are not part of this engine; mission: is static")
        )
    for name, tier in (spec.model_tiers or {}).items():
        for key in ("adapter_support", "adapter_path_template"):
            if getattr(tier, key) is not None:
                warnings.append(
                    (
                        ("model_tiers", name, key),
                        "accepted but not used: LoRA adapters are served by provider: local "
                        "with adapter: (see finetune:)",
                    )
                )
    tiers_without_tools = {
        n for n, t in (spec.model_tiers or {}).items() if t.tool_calling is False
    }
    memory = spec.memory
    if memory is not None:
        for key, why in (
            ("db", "memory lives in the trace store"),
            ("reconcile_llm", "facts are reconciled by their subject, predicate and value"),
        ):
            default = type(memory).model_fields[key].default
            if getattr(memory, key) != default:
                warnings.append((("memory", key), f"accepted but not used: {why}"))
    si = spec.self_improvement
    if si is not None:
        for k, surface in enumerate(si.editable_surfaces):
            if surface in SURFACE_GROUPS and not SURFACE_GROUPS[surface]:
                warnings.append(
                    (
                        ("self_improvement", "editable_surfaces", k),
                        f"{surface!r} is not editable by the improvement loop yet; it edits "
                        "descriptions and model_tiers (and stage.temperature / stage.max_tokens)",
                    )
                )
        if si.search_runs > 0 and si.refiner_tier is None:
            warnings.append(
                (
                    ("self_improvement", "search_runs"),
                    "the frontier search needs a refiner: with no refiner_tier only `armature "
                    "optimize` rounds search (on the highest tier); set refiner_tier for "
                    "`armature improve` and scheduled rounds to search too",
                )
            )
    for key, skill in spec.skill_library.items():
        if skill.adapter is not None:
            warnings.append(
                (
                    ("skill_library", key, "adapter"),
                    "accepted but not used: the skill's text goes into the prompt"
                    + ("" if skill.content else " (and it has none)"),
                )
            )
    known_keys = set(_input_names(spec)) | {s.id for s in spec.stages} | set(RUN_VARIABLES)
    for i, stage in enumerate(spec.stages):
        retry = stage.on_fail.loop if stage.on_fail is not None else None
        if retry is not None and retry.stage is not None and retry.stage != stage.id:
            warnings.append(
                (
                    ("stages", i, "on_fail", "loop", "stage"),
                    f"only the failing stage is retried (here {stage.id!r}), not "
                    f"{retry.stage!r}; to redo an earlier stage, use loop: on a stage that "
                    "does both",
                )
            )
        if stage.role is not None and stage.role.tools:
            role_tier = stage.role.model_tier
            if role_tier in tiers_without_tools:
                warnings.append(
                    (
                        ("stages", i, "role", "tools"),
                        f"tier {role_tier!r} says tool_calling: false, but this role calls tools; "
                        "use a tier whose model calls tools",
                    )
                )
        for field, instead in (
            ("response_stage", "follow a run with armature submit --wait or the Temporal Web UI"),
            ("sandbox_image", "tools run in a restricted subprocess (README: safety)"),
            ("subagent_spec_path", "subagent_spec is resolved relative to the spec's folder"),
        ):
            if getattr(stage, field):
                warnings.append(
                    (("stages", i, field), f"accepted from 0.7.0 but not used: {instead}")
                )
        if stage.signature is not None and _declares_inputs(spec):
            for key in stage.signature.input:
                if key not in known_keys:
                    warnings.append(
                        (
                            ("stages", i, "signature", "input", key),
                            f"{key!r} is not a run input or a stage, so it narrows to nothing",
                        )
                    )
    return warnings


def _bare_input_warnings(spec: Spec) -> list[Problem]:
    """Names no stage produces, read by templates of a spec that declares no inputs: run
    inputs, as in 0.7.0. One warning per name, at its first use."""
    if _declares_inputs(spec):
        return []
    known = set(RUN_VARIABLES) | set(POST_RUN_VARIABLES) | {s.id for s in spec.stages}
    if spec.continuation is not None:
        known.add(spec.continuation.inject_as)
    if spec.memory is not None:
        known |= {spec.memory.inject_as, "_stale_memory_keys"}
        if spec.memory.keeps_facts:
            known.add(spec.memory.inject_knowledge_as)
    first: dict[str, Path] = {}
    for i, stage in enumerate(spec.stages):
        local = set(known)
        if stage.loop is not None:
            local.add(stage.loop.iteration_var)
            local |= set(stage.loop.carry_forward or _output_fields(stage) or [])
        for path, source, is_expr, extra in stage_templates(spec, i):
            try:
                names = referenced_names(source, expression=is_expr)
            except TemplateSyntaxError:
                continue
            for name in sorted(set(names) - local - extra):
                first.setdefault(name, path)
    if not first:
        return []
    listed = sorted(first)
    return [
        (
            path,
            f"{name!r} is read as a run input (no stage produces it); declare the inputs so a "
            f"misspelt name is caught: inputs: {listed}",
        )
        for name, path in sorted(first.items(), key=lambda kv: str(kv[1]))
    ]
