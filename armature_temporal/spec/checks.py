"""Whole-document checks on a parsed :class:`~armature_temporal.spec.models.Spec`.

Each check yields ``(path, message)`` where ``path`` is the field path as a tuple
(``("stages", 2, "role", "model_tier")``); the loader turns it into ``file:line:column``.
Subagent files are checked by the loader, which knows about files.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from jinja2 import TemplateSyntaxError
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.models import STANDARD_TIERS, Spec, Stage
from armature_temporal.spec.templating import referenced_names

__all__ = [
    "BUILTIN_TOOLS",
    "EDITABLE_FIELDS",
    "Path",
    "check_spec",
    "cron_problem",
    "find_cycle",
    "tier_names",
]

Path = tuple[str | int, ...]
Problem = tuple[Path, str]

#: Tools that ship with Armature; others are named ``module:function``.
BUILTIN_TOOLS: tuple[str, ...] = ("file_read", "file_write", "file_list", "http_request", "shell")
#: Stage fields the improvement loop may edit.
EDITABLE_FIELDS: tuple[str, ...] = ("description", "model_tier", "temperature", "max_tokens")
#: Names every template may use besides inputs and upstream stages.
RUN_VARIABLES: tuple[str, ...] = (
    "inputs",
    "mission",
    "run",
    "_retry_attempt",
    "_last_error",
    "_last_result",
)
POST_RUN_VARIABLES: tuple[str, ...] = ("_transcript", "_diagnostics")
_PY_TOOL = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def tier_names(spec: Spec) -> list[str]:
    """The tiers a spec can use, smallest first."""
    return list(spec.model_tiers) if spec.model_tiers else list(STANDARD_TIERS)


def check_spec(spec: Spec) -> list[Problem]:
    """Every whole-document problem in ``spec`` (empty when it is consistent)."""
    problems: list[Problem] = []
    problems += _check_stage_graph(spec)
    problems += _check_tiers(spec)
    problems += _check_schemas(spec)
    problems += _check_templates(spec)
    problems += _check_tools_and_rules(spec)
    problems += _check_loops_and_fanout(spec)
    problems += _check_top_level_refs(spec)
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


def ancestors(spec: Spec) -> dict[str, set[str]]:
    """Every stage's transitive dependencies (ignores unknown ids and cycles)."""
    deps = {s.id: [d for d in s.depends_on if d != s.id] for s in spec.stages}
    out: dict[str, set[str]] = {}
    for sid in deps:
        seen: set[str] = set()
        todo = list(deps[sid])
        while todo:
            d = todo.pop()
            if d in seen or d not in deps:
                continue
            seen.add(d)
            todo.extend(deps[d])
        out[sid] = seen
    return out


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
        if msg := bad(default.model_tier):
            yield ("role_type_defaults", rtype, "model_tier"), msg
    for i, stage in enumerate(spec.stages):
        if stage.role is not None and (msg := bad(stage.role.model_tier)):
            yield ("stages", i, "role", "model_tier"), msg
        for k, arm in enumerate(stage.arms):
            if msg := bad(arm.model_tier):
                yield ("stages", i, "arms", k, "model_tier"), msg
        arm_ids = [a.arm_id for a in stage.arms]
        for k, arm_id in enumerate(arm_ids):
            if arm_id in arm_ids[:k]:
                yield ("stages", i, "arms", k, "arm_id"), f"duplicate arm_id {arm_id!r}"


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
        elif stage.role is not None and stage.role.type == "judge":
            props = stage.output_schema.get("properties", {})
            if not isinstance(props, dict) or "score" not in props:
                yield (
                    ("stages", i, "output_schema"),
                    "a judge's output_schema must have a 'score' property (a number in "
                    "[0, 1]); add it, or drop output_schema to use the default judge contract",
                )


def schema_properties(schema: dict[str, Any] | None) -> list[str] | None:
    """Declared top-level property names, or None when the schema does not pin them."""
    if not schema or not isinstance(schema.get("properties"), dict):
        return None
    return list(schema["properties"])


# --- templates and expressions -----------------------------------------------------------------


def _input_names(spec: Spec) -> list[str]:
    return schema_properties(spec.inputs_schema) or []


def _check_templates(spec: Spec) -> Iterator[Problem]:
    ups = ancestors(spec)
    stages = {s.id: s for s in spec.stages}
    inputs = _input_names(spec)
    for name in inputs:
        if name in stages:
            yield (("inputs",), f"input {name!r} has the same name as a stage; rename one of them")
    prior = spec.continuation.inject_as if spec.continuation else None
    for i, stage in enumerate(spec.stages):
        base = set(RUN_VARIABLES) | set(inputs)
        if prior:
            base.add(prior)
        if stage.post_run:
            base |= set(POST_RUN_VARIABLES)
            visible = set(stages) - {stage.id}
        else:
            visible = ups.get(stage.id, set())
        if stage.loop is not None:
            base.add(stage.loop.iteration_var)
        texts: list[tuple[Path, str, bool, set[str]]] = []
        if stage.role is not None:
            texts.append(
                (("stages", i, "role", "description"), stage.role.description, False, set())
            )
        for k, arm in enumerate(stage.arms):
            if arm.description is not None:
                texts.append(
                    (("stages", i, "arms", k, "description"), arm.description, False, set())
                )
        if stage.gate is not None and stage.gate.message is not None:
            texts.append((("stages", i, "gate", "message"), stage.gate.message, False, {"output"}))
        if stage.tool is not None:
            for key, value in stage.tool.args.items():
                if isinstance(value, str):
                    texts.append((("stages", i, "tool", "args", key), value, False, set()))
        if stage.loop is not None and stage.loop.until is not None:
            texts.append((("stages", i, "loop", "until"), stage.loop.until, True, {"output"}))
        for field in ("condition", "skip_if"):
            expr = getattr(stage, field)
            if expr is not None:
                texts.append((("stages", i, field), expr, True, set()))
        for path, source, is_expr, extra in texts:
            yield from _check_one_template(
                path, source, is_expr, base | extra, visible, stages, stage.id
            )


def _check_one_template(
    path: Path,
    source: str,
    is_expr: bool,
    allowed: set[str],
    visible: set[str],
    stages: dict[str, Stage],
    own_id: str,
) -> Iterator[Problem]:
    kind = "expression" if is_expr else "template"
    try:
        names = referenced_names(source, expression=is_expr)
    except TemplateSyntaxError as exc:
        where = f" on line {exc.lineno} of the {kind}" if not is_expr and exc.lineno else ""
        yield path, f"{kind} syntax error{where}: {exc.message}; value: {source!r}"
        return
    for name, attrs in sorted(names.items()):
        if name in allowed:
            continue
        if name in visible:
            yield from _check_stage_attrs(path, name, attrs, stages[name])
            continue
        if name in stages:
            if name == own_id:
                msg = (
                    f"{kind} reads the stage's own output {name!r}; inside loop.until and "
                    "gate.message use 'output', elsewhere it does not exist yet"
                )
            else:
                msg = (
                    f"{kind} reads stage {name!r}, which is not upstream of {own_id!r}, so "
                    f"its output may not exist yet; add {name!r} to depends_on"
                )
            yield path, msg
            continue
        choices = sorted(allowed | visible)
        yield (
            path,
            f"{kind} uses unknown name {name!r}; available: {choices}{did_you_mean(name, choices)}",
        )


def _check_stage_attrs(path: Path, name: str, attrs: set[str], stage: Stage) -> Iterator[Problem]:
    if stage.role is not None and stage.role.type == "judge" and stage.output_schema is None:
        fields: list[str] | None = ["score", "rationale"]
    elif stage.output_mode == "text" and stage.role is not None:
        fields = ["content"]
    else:
        fields = schema_properties(stage.output_schema)
    if fields is None:
        return
    for attr in sorted(attrs):
        if attr not in fields:
            yield (
                path,
                f"stage {name!r} has no output field {attr!r}; its fields: {fields}"
                f"{did_you_mean(attr, fields)}",
            )


# --- tools, safety rules -----------------------------------------------------------------------


def tool_problem(name: str) -> str | None:
    """Why ``name`` is not a usable tool name, or None."""
    if name in BUILTIN_TOOLS or _PY_TOOL.match(name):
        return None
    return (
        f"unknown tool {name!r}; built-in tools: {list(BUILTIN_TOOLS)}, or name a Python "
        f"function as module:function{did_you_mean(name, BUILTIN_TOOLS)}"
    )


def _check_tools_and_rules(spec: Spec) -> Iterator[Problem]:
    for i, stage in enumerate(spec.stages):
        if stage.role is not None:
            for k, tool in enumerate(stage.role.tools):
                if msg := tool_problem(tool):
                    yield ("stages", i, "role", "tools", k), msg
        if stage.tool is not None and (msg := tool_problem(stage.tool.name)):
            yield ("stages", i, "tool", "name"), msg
    uses_http = [
        i
        for i, st in enumerate(spec.stages)
        if (st.role is not None and "http_request" in st.role.tools)
        or (st.tool is not None and st.tool.name == "http_request")
    ]
    if uses_http and not spec.http_allow_hosts:
        yield (
            ("stages", uses_http[0]),
            "this stage uses http_request but http_allow_hosts is empty, so every request would "
            "be refused; list the hosts it may reach, e.g. http_allow_hosts: [api.example.com]",
        )
    for r, rule in enumerate(spec.safety_rules):
        if rule.tool != "*" and (msg := tool_problem(rule.tool)):
            yield ("safety_rules", r, "tool"), msg + " (or * for every tool)"
        cond = rule.condition
        if cond is None:
            continue
        if cond.op == "matches_regex":
            if not isinstance(cond.value, str):
                yield (
                    ("safety_rules", r, "condition", "value"),
                    f"matches_regex needs a regex string, got {cond.value!r}",
                )
            else:
                try:
                    re.compile(cond.value)
                except re.error as exc:
                    yield (
                        ("safety_rules", r, "condition", "value"),
                        f"regex {cond.value!r} does not compile: {exc}",
                    )
        elif cond.op != "truthy" and "value" not in cond.model_fields_set:
            yield (
                ("safety_rules", r, "condition"),
                f"op {cond.op!r} compares with a value; add value:",
            )
        if (
            cond.field == "_tool_reversibility"
            and cond.op in ("equals", "not_equals")
            and cond.value not in ("full", "partial", "none")
        ):
            yield (
                ("safety_rules", r, "condition", "value"),
                f"_tool_reversibility is full, partial or none, not {cond.value!r}",
            )


# --- loops, fan-out, partitions -----------------------------------------------------------------


def _check_loops_and_fanout(spec: Spec) -> Iterator[Problem]:
    ups = ancestors(spec)
    for i, stage in enumerate(spec.stages):
        if stage.loop is not None and stage.loop.carry_forward:
            fields = schema_properties(stage.output_schema)
            if stage.output_mode == "text":
                fields = ["content"]
            for k, field in enumerate(stage.loop.carry_forward):
                if fields is not None and field not in fields:
                    yield (
                        ("stages", i, "loop", "carry_forward", k),
                        f"output has no field {field!r}; its fields: {fields}"
                        f"{did_you_mean(field, fields)}",
                    )
        if stage.partition_key is not None:
            root = stage.partition_key.split(".", 1)[0]
            allowed = ["inputs", *sorted(ups.get(stage.id, set()))]
            if root not in allowed or "." not in stage.partition_key:
                yield (
                    ("stages", i, "partition_key"),
                    f"partition_key {stage.partition_key!r} must be a dot path into inputs "
                    f"or an upstream stage's output, e.g. inputs.items; roots: {allowed}"
                    f"{did_you_mean(root, allowed)}",
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
        for k, surface in enumerate(si.editable_surfaces):
            sid, _, field = surface.partition(".")
            path = ("self_improvement", "editable_surfaces", k)
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
    if spec.finetune is not None:
        if msg := cron_problem(spec.finetune.schedule):
            yield ("finetune", "schedule"), msg
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
