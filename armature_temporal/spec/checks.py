"""Whole-document checks on a parsed :class:`~armature_temporal.spec.models.Spec`.

Each check yields ``(path, message)`` where ``path`` is the field path as a tuple
(``("stages", 2, "role", "model_tier")``); the loader turns it into ``file:line:column``.
Subagent files are checked by the loader, which knows about files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.context_window import context_problems
from armature_temporal.spec.experience import experience_problems
from armature_temporal.spec.knowledge import KNOWLEDGE_SURFACE
from armature_temporal.spec.models import (
    IDENTIFIER,
    STANDARD_TIERS,
    SURFACE_GROUPS,
    Spec,
)
from armature_temporal.spec.references import (
    Path,
    Problem,
    _check_templates,
    _declares_inputs,
    _input_names,
    ancestors,
    schema_properties,
)
from armature_temporal.spec.templating import split_template_command
from armature_temporal.spec.tool_checks import BUILTIN_TOOLS, check_tools_and_rules

__all__ = [
    "BUILTIN_TOOLS",
    "EDITABLE_FIELDS",
    "JUDGE_SCORE_KEYS",
    "Path",
    "check_spec",
    "cron_problem",
    "find_cycle",
    "tier_names",
]

#: Stage fields the improvement loop may edit.
EDITABLE_FIELDS: tuple[str, ...] = ("description", "model_tier", "temperature", "max_tokens")
#: Where a judge's output carries its score, first match wins (0.7.0 judges use all three).
JUDGE_SCORE_KEYS: tuple[str, ...] = ("score", "quality_score", "confidence")


def tier_names(spec: Spec) -> list[str]:
    """The tiers a spec can use, smallest first."""
    return list(spec.model_tiers) if spec.model_tiers else list(STANDARD_TIERS)


def check_spec(spec: Spec, skip: set[str] | frozenset[str] = frozenset()) -> list[Problem]:
    """Every whole-document problem in ``spec`` (empty when it is consistent).

    ``skip`` names check families (``tiers``, ``templates``) to leave out: the loader skips
    those whose inputs had schema errors, so one mistake is not reported twice."""
    problems: list[Problem] = []
    problems += _check_stage_graph(spec)
    if "tiers" not in skip:
        problems += _check_tiers(spec)
    problems += _check_schemas(spec)
    if "templates" not in skip:
        problems += _check_templates(spec)
    problems += check_tools_and_rules(spec)
    problems += _check_loops_and_fanout(spec)
    problems += _check_top_level_refs(spec)
    problems += _check_older_fields(spec)
    problems += context_problems(spec, tier_names(spec))
    return problems


# --- stage graph -----------------------------------------------------------------------------


def _check_stage_graph(spec: Spec) -> Iterator[Problem]:
    seen: dict[str, int] = {}
    for i, stage in enumerate(spec.stages):
        if stage.id in seen:
            yield (
                ("stages", i, "id"),
                f"duplicate stage id {stage.id!r} (first used by stages[{seen[stage.id]}]); "
                "give each stage its own id",
            )
        else:
            seen[stage.id] = i
    ids = list(seen)
    post_run = {s.id for s in spec.stages if s.post_run}
    for i, stage in enumerate(spec.stages):
        for j, dep in enumerate(stage.depends_on):
            path: Path = ("stages", i, "depends_on", j)
            if dep not in seen:
                yield path, f"unknown stage {dep!r}; defined stages: {ids}{did_you_mean(dep, ids)}"
            elif dep == stage.id:
                yield path, f"stage {stage.id!r} depends on itself; remove it from depends_on"
            elif dep in post_run:
                yield (
                    path,
                    f"{dep!r} is a post_run stage, which runs after every other stage, "
                    "so nothing can depend on it; remove it from depends_on",
                )
        if stage.post_run and stage.depends_on:
            yield (
                ("stages", i, "depends_on"),
                "post_run stages run after every other stage; remove depends_on",
            )
    cycle = find_cycle(
        {s.id: [d for d in s.depends_on if d in seen and d != s.id] for s in spec.stages}
    )
    if cycle:
        first = seen[cycle[0]]
        yield (
            ("stages", first, "depends_on"),
            f"dependency cycle: {' -> '.join(cycle)}; break it by removing one depends_on",
        )


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a path that ends where it starts (``[a, b, c, a]``), or None.

    ``graph`` maps a node to the nodes it depends on. Iterative, so deep graphs are fine.
    """
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for root in graph:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        on_path: list[str] = [root]
        state[root] = 1
        while stack:
            node, index = stack[-1]
            deps = graph.get(node, [])
            if index < len(deps):
                stack[-1] = (node, index + 1)
                nxt = deps[index]
                if state.get(nxt) == 1:
                    start = on_path.index(nxt)
                    # Report in execution order: a depends_on b means b runs first.
                    loop = [*on_path[start:], nxt]
                    return list(reversed(loop))
                if not state.get(nxt):
                    state[nxt] = 1
                    on_path.append(nxt)
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                on_path.pop()
                stack.pop()
    return None


# --- tiers -------------------------------------------------------------------------------------


def _check_tiers(spec: Spec) -> Iterator[Problem]:
    tiers = tier_names(spec)

    def bad(tier: str | None) -> str | None:
        if tier is None or tier in tiers:
            return None
        return f"unknown tier {tier!r}; defined tiers: {tiers}{did_you_mean(tier, tiers)}"

    for name, declared in (spec.model_tiers or {}).items():
        if declared.adapter is not None and declared.provider != "local":
            yield (
                ("model_tiers", name, "adapter"),
                f"adapter {declared.adapter!r} applies to provider: local only (this tier's "
                f"provider is {declared.provider!r}); remove it or use provider: local",
            )
        named = (declared.adapter or "").partition("latest:")[2]
        if (
            declared.adapter
            and declared.adapter.startswith("latest:")
            and named not in {s.id for s in spec.stages}
        ):
            ids = [s.id for s in spec.stages]
            yield (
                ("model_tiers", name, "adapter"),
                f"{declared.adapter!r} names no stage of this spec; stages: {ids}"
                + did_you_mean(named, ids),
            )
    for rtype, default in spec.role_type_defaults.items():
        used = any(
            s.role is not None and s.role.type == rtype and s.role.model_tier is None
            for s in spec.stages
        )
        if used and (msg := bad(default.model_tier)):
            yield ("role_type_defaults", rtype, "model_tier"), msg
    for i, stage in enumerate(spec.stages):
        if stage.role is not None and (msg := bad(stage.role.model_tier)):
            yield ("stages", i, "role", "model_tier"), msg
        if stage.role is not None and (msg := bad(stage.role.reasoning_tier)):
            yield ("stages", i, "role", "reasoning_tier"), msg
        for k, arm in enumerate(stage.arms):
            if msg := bad(arm.model_tier):
                yield ("stages", i, "arms", k, "model_tier"), msg
            if msg := bad(arm.reasoning_tier):
                yield ("stages", i, "arms", k, "reasoning_tier"), msg
        if stage.cache is not None and (msg := bad(stage.cache.verify_tier)):
            yield ("stages", i, "cache", "verify_tier"), msg
        arm_ids = [a.arm_id for a in stage.arms]
        for k, arm_id in enumerate(arm_ids):
            if arm_id in arm_ids[:k]:
                yield ("stages", i, "arms", k, "arm_id"), f"duplicate arm_id {arm_id!r}"
        evolve = stage.bandit.evolve if stage.bandit is not None else None
        if evolve is not None and (msg := bad(evolve.refiner_tier)):
            yield ("stages", i, "bandit", "evolve", "refiner_tier"), msg


# --- JSON Schemas ------------------------------------------------------------------------------


def _schema_problem(schema: Any) -> str | None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"not a valid JSON Schema: {exc.message}" + (f" (at {where})" if where else "")
    return None


def _check_schemas(spec: Spec) -> Iterator[Problem]:
    if spec.inputs is not None and (msg := _schema_problem(spec.inputs)):
        yield ("inputs",), msg
    contracts = spec.contracts.inputs if spec.contracts is not None else None
    if contracts is not None and (msg := _schema_problem(contracts)):
        yield ("contracts", "inputs"), msg
    for i, stage in enumerate(spec.stages):
        if stage.output_schema is None:
            continue
        if msg := _schema_problem(stage.output_schema):
            yield ("stages", i, "output_schema"), msg


# --- templates and expressions -----------------------------------------------------------------


# Methods a template may call on ``inputs`` (a dict): not input names.


# --- loops, fan-out, partitions -----------------------------------------------------------------


def _check_loops_and_fanout(spec: Spec) -> Iterator[Problem]:
    ups = ancestors(spec)
    for i, stage in enumerate(spec.stages):
        context = stage.bandit.context if stage.bandit is not None else None
        if context is not None and _declares_inputs(spec):
            inputs = _input_names(spec)
            named = [*context.inputs, *([context.embedding.input] if context.embedding else [])]
            for name in named:
                if name not in inputs:
                    yield (
                        ("stages", i, "bandit", "context"),
                        f"context input {name!r} is not one of the spec's inputs {inputs}"
                        f"{did_you_mean(name, inputs)}; name a declared input",
                    )
        if stage.partition_key is not None and stage.partition_source is None:
            root = stage.partition_key.split(".", 1)[0]
            inputs = _input_names(spec)
            allowed = ["inputs", *inputs, *sorted(ups.get(stage.id, set()))]
            bare_ok = "." not in stage.partition_key and (
                root in inputs or root in ups.get(stage.id, set()) or not _declares_inputs(spec)
            )
            if not bare_ok and (root not in allowed or root == stage.partition_key == "inputs"):
                yield (
                    ("stages", i, "partition_key"),
                    f"partition_key {stage.partition_key!r} must name a run input (queries), "
                    f"or be a dot path into inputs or an upstream stage's output (inputs.items, "
                    f"plan.queries); known: {allowed}{did_you_mean(root, allowed)}",
                )
        if (
            stage.partition_key is not None
            and stage.partition_source is not None
            and not IDENTIFIER.match(stage.partition_key)
        ):
            yield (
                ("stages", i, "partition_key"),
                f"with partition_source, partition_key is the name each item is bound to; "
                f"{stage.partition_key!r} is not a plain name (letters, digits, _)",
            )
        if stage.on_fail is not None and stage.on_fail.loop is not None:
            loop = stage.on_fail.loop
            if loop.backoff_max_s is not None and loop.backoff_max_s < loop.backoff_s:
                yield (
                    ("stages", i, "on_fail", "loop", "backoff_max_s"),
                    f"backoff_max_s {loop.backoff_max_s:g} is below backoff_s "
                    f"{loop.backoff_s:g}; raise it or drop it",
                )
        if stage.on_fail is not None and stage.on_fail.escalate and stage.role is None:
            yield (
                ("stages", i, "on_fail", "escalate"),
                "escalate moves an LLM stage up the tier ladder; this stage has no role",
            )


# --- continuation, triggers, loops over the spec --------------------------------------------------

_CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?|[A-Za-z]{3}(-[A-Za-z]{3})?)(/\d+)?$")
_CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


def cron_problem(expr: str) -> str | None:
    """Why ``expr`` is not a five-field cron expression (or macro), or None."""
    text = expr.strip()
    if text in _CRON_MACROS or text.startswith("@every "):
        return None
    fields = text.split()
    if len(fields) != 5:
        return (
            f"cron {expr!r} has {len(fields)} fields, needs 5 (minute hour day month "
            "weekday), e.g. '0 9 * * 1-5', or a macro such as @daily"
        )
    for field in fields:
        if not all(_CRON_FIELD.match(part) for part in field.split(",")):
            return f"cron field {field!r} in {expr!r} is not valid (use *, n, a-b, */n, a,b)"
    return None


def _check_top_level_refs(spec: Spec) -> Iterator[Problem]:
    stages = {s.id: s for s in spec.stages}
    ids = list(stages)

    def stage_ref(path: Path, ref: str, what: str) -> Iterator[Problem]:
        sid, _, field = ref.partition(".")
        if sid not in stages:
            yield (
                path,
                f"unknown stage {sid!r} in {what} {ref!r}; stages: {ids}" + did_you_mean(sid, ids),
            )
        elif not field:
            yield path, f"{what} {ref!r} needs a field after the stage id: stage.field"

    if spec.continuation is not None:
        for key, ref in spec.continuation.carry_forward.items():
            yield from stage_ref(("continuation", "carry_forward", key), ref, "carry_forward")
    for t, trigger in enumerate(spec.triggers):
        if trigger.schedule is not None and (msg := cron_problem(trigger.schedule)):
            yield ("triggers", t, "schedule"), msg
        if trigger.path is not None and not trigger.path.startswith("/"):
            yield ("triggers", t, "path"), f"webhook path {trigger.path!r} must start with /"
    if spec.self_improvement is not None:
        si = spec.self_improvement
        if msg := cron_problem(si.schedule):
            yield ("self_improvement", "schedule"), msg
        tiers = tier_names(spec)
        if si.refiner_tier is not None and si.refiner_tier not in tiers:
            yield (
                ("self_improvement", "refiner_tier"),
                f"unknown tier {si.refiner_tier!r}; defined tiers: {tiers}"
                + did_you_mean(si.refiner_tier, tiers),
            )
        if si.search_runs > 0 and si.cases is None:
            yield (
                ("self_improvement", "search_runs"),
                f"search_runs {si.search_runs} is a budget of case runs, but the spec names no "
                "cases file to score candidates on; set self_improvement.cases: "
                "evals/<name>.cases.yaml, or search_runs: 0",
            )
        for k, surface in enumerate(si.editable_surfaces):
            sid, _, field = surface.partition(".")
            path = ("self_improvement", "editable_surfaces", k)
            if surface in SURFACE_GROUPS:
                continue  # a 0.7.0 group name; spec_warnings covers those not editable here
            if surface == KNOWLEDGE_SURFACE and sid not in stages:
                if spec.knowledge is None or not spec.knowledge.candidates:
                    yield (
                        path,
                        f"{surface!r} lets the enrichment loop add documents to the spec's "
                        "knowledge, chosen from knowledge.candidates, which this spec does not "
                        "list; add knowledge: {candidates: [more-docs/]}",
                    )
                continue
            if sid not in stages:
                yield (
                    path,
                    f"unknown stage {sid!r} in {surface!r}; stages: {ids}" + did_you_mean(sid, ids),
                )
            elif field not in EDITABLE_FIELDS:
                yield (
                    path,
                    f"{surface!r}: editable fields are {list(EDITABLE_FIELDS)}"
                    + did_you_mean(field, EDITABLE_FIELDS),
                )
            elif stages[sid].role is None:
                yield path, f"{sid!r} is not an LLM stage, so it has no {field} to edit"
    if spec.experience is not None:
        yield from experience_problems(spec.experience, tier_names(spec))
        if spec.experience.schedule is not None and (msg := cron_problem(spec.experience.schedule)):
            yield ("experience", "schedule"), msg
    if spec.finetune is not None:
        if msg := cron_problem(spec.finetune.schedule):
            yield ("finetune", "schedule"), msg
        if spec.finetune.method == "dpo" and spec.finetune.continual:
            yield (
                ("finetune", "continual"),
                "continual training builds on a supervised adapter and is for method sft; "
                "method dpo trains a fresh preference-tuned adapter each round: remove "
                "continual or set method: sft",
            )
        for k, sid in enumerate(spec.finetune.target_stages):
            if sid not in stages:
                yield (
                    ("finetune", "target_stages", k),
                    f"unknown stage {sid!r}; stages: {ids}" + did_you_mean(sid, ids),
                )
            elif stages[sid].role is None:
                yield (
                    ("finetune", "target_stages", k),
                    f"{sid!r} is not an LLM stage; only LLM stages have traces to train on",
                )


# --- fields of the armature-agents 0.7.0 format ---------------------------------------------------


def _check_older_fields(spec: Spec) -> Iterator[Problem]:
    stages = {s.id: s for s in spec.stages}
    ids = list(stages)
    adapters = sorted(spec.adapters)
    skills = sorted(spec.skill_library)
    layers = [layer.name for layer in spec.context_layers]
    for i, stage in enumerate(spec.stages):
        if stage.adapter is not None and stage.adapter not in spec.adapters:
            yield (
                ("stages", i, "adapter"),
                f"unknown adapter {stage.adapter!r}; adapters: {adapters}"
                + did_you_mean(stage.adapter, adapters),
            )
        for k, skill in enumerate(stage.role.skills if stage.role is not None else []):
            if skill not in spec.skill_library:
                yield (
                    ("stages", i, "role", "skills", k),
                    f"unknown skill {skill!r}; skill_library has {skills}"
                    + did_you_mean(skill, skills),
                )
        policy = stage.context_policy
        for k, name in enumerate(policy.must if policy is not None else []):
            if name not in layers:
                yield (
                    ("stages", i, "context_policy", "must", k),
                    f"unknown context layer {name!r}; context_layers: {layers}"
                    + did_you_mean(name, layers),
                )
    for k, name in enumerate(spec.context_policy.must if spec.context_policy else []):
        if name not in layers:
            yield (
                ("context_policy", "must", k),
                f"unknown context layer {name!r}; context_layers: {layers}"
                + did_you_mean(name, layers),
            )
    for i, stage in enumerate(spec.stages):
        props = (stage.output_schema or {}).get("properties")
        if (
            stage.block_below is not None
            and stage.output_schema is not None
            and not (isinstance(props, dict) and any(k in props for k in JUDGE_SCORE_KEYS))
        ):
            yield (
                ("stages", i, "block_below"),
                "block_below needs a score, but this judge's output_schema has no score, "
                "quality_score or confidence property; add one (a number in [0, 1])",
            )
        if stage.min_confidence is not None and stage.role is None:
            yield (
                ("stages", i, "min_confidence"),
                "min_confidence holds an LLM stage's outputs to a confidence; this stage has no "
                "role, so remove it",
            )
        for k, criterion in enumerate(stage.evaluate):
            if criterion.strip().lower() == "rationale":
                yield (
                    ("stages", i, "evaluate", k),
                    "'rationale' is where the evaluation explains its scores; name the "
                    "criterion differently, e.g. 'reasoning is sound'",
                )
    for name, adapter in spec.adapters.items():
        if adapter.type == "script" and isinstance(adapter.cmd, str) and not adapter.shell:
            try:
                split_template_command(adapter.cmd)
            except ValueError as exc:
                yield (
                    ("adapters", name, "cmd"),
                    f"{exc} (adapters run without a shell unless shell: true; or give cmd as "
                    "an argv list)",
                )
    if spec.memory is not None:
        for k, cap in enumerate(spec.memory.capture):
            path: Path = ("memory", "capture", k)
            if cap.stage not in stages:
                yield (
                    (*path, "stage"),
                    f"unknown stage {cap.stage!r}; stages: {ids}" + did_you_mean(cap.stage, ids),
                )
                continue
            fields = schema_properties(stages[cap.stage].output_schema)
            if fields is not None and cap.key not in fields:
                yield (
                    (*path, "key"),
                    f"stage {cap.stage!r} has no output field {cap.key!r}; its fields: {fields}"
                    + did_you_mean(cap.key, fields),
                )
    outputs = spec.contracts.outputs if spec.contracts is not None else []
    for k, contract in enumerate(outputs):
        if contract.stage not in stages:
            yield (
                ("contracts", "outputs", k, "stage"),
                f"unknown stage {contract.stage!r}; stages: {ids}"
                + did_you_mean(contract.stage, ids),
            )
