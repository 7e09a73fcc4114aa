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
from armature_temporal.spec.models import (
    IDENTIFIER,
    STANDARD_TIERS,
    SURFACE_GROUPS,
    Spec,
    Stage,
    unwrap_expression,
)
from armature_temporal.spec.templating import referenced_names, split_template_command

__all__ = [
    "BUILTIN_TOOLS",
    "EDITABLE_FIELDS",
    "JUDGE_SCORE_KEYS",
    "Path",
    "check_spec",
    "cron_problem",
    "find_cycle",
    "implicit_dependencies",
    "spec_warnings",
    "stage_templates",
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
    "run_id",
    "_retry_attempt",
    "_last_error",
    "_last_result",
)
#: Where a judge's output carries its score, first match wins (0.7.0 judges use all three).
JUDGE_SCORE_KEYS: tuple[str, ...] = ("score", "quality_score", "confidence")
#: Fields every stage output may carry besides its own: skipped and failed-as-value markers.
MARKER_FIELDS: tuple[str, ...] = ("_skipped", "_failed", "error", "error_type")
POST_RUN_VARIABLES: tuple[str, ...] = ("_transcript", "_diagnostics")
_PY_TOOL = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


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
    problems += _check_tools_and_rules(spec)
    problems += _check_loops_and_fanout(spec)
    problems += _check_top_level_refs(spec)
    problems += _check_older_fields(spec)
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
        used = any(
            s.role is not None and s.role.type == rtype and s.role.model_tier is None
            for s in spec.stages
        )
        if used and (msg := bad(default.model_tier)):
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


def schema_properties(schema: dict[str, Any] | None) -> list[str] | None:
    """Declared top-level property names, or None when the schema does not pin them."""
    if not schema or not isinstance(schema.get("properties"), dict):
        return None
    return list(schema["properties"])


# --- templates and expressions -----------------------------------------------------------------


def _input_names(spec: Spec) -> list[str]:
    return schema_properties(spec.inputs_schema) or []


def _declares_inputs(spec: Spec) -> bool:
    return spec.inputs is not None or (
        spec.contracts is not None and spec.contracts.inputs is not None
    )


Template = tuple[Path, str, bool, set[str]]


def stage_templates(spec: Spec, i: int) -> list[Template]:
    """Every template and expression of stage ``i``: ``(path, source, is_expression,
    extra names it may read)``. ``until`` expressions may read the output's fields by name."""
    stage = spec.stages[i]
    out_fields = set(_output_fields(stage) or [])
    texts: list[Template] = []
    item = {stage.partition_key or "item"} if stage.partition_source is not None else set()
    if stage.inject_file_as is not None:
        item.add(stage.inject_file_as)
    if stage.role is not None:
        texts.append((("stages", i, "role", "description"), stage.role.description, False, item))
    for k, arm in enumerate(stage.arms):
        if arm.description is not None:
            texts.append((("stages", i, "arms", k, "description"), arm.description, False, item))
    if stage.gate is not None and stage.gate.message is not None:
        texts.append((("stages", i, "gate", "message"), stage.gate.message, False, {"output"}))
    if stage.tool is not None:
        for key, value in stage.tool.args.items():
            if isinstance(value, str):
                texts.append((("stages", i, "tool", "args", key), value, False, item))
    if stage.adapter is not None and stage.adapter in spec.adapters:
        adapter = spec.adapters[stage.adapter]
        parts = [adapter.cmd] if isinstance(adapter.cmd, str) else list(adapter.cmd or [])
        for part in parts:
            texts.append((("adapters", stage.adapter, "cmd"), part, False, set()))
        for key, value in adapter.args.items():
            if isinstance(value, str):
                texts.append((("adapters", stage.adapter, "args", key), value, False, set()))
    if stage.partition_source is not None:
        source = unwrap_expression(stage.partition_source)
        texts.append((("stages", i, "partition_source"), source, True, set()))
    if stage.loop is not None and stage.loop.until is not None:
        extra = {"output", "_result"} | out_fields
        texts.append((("stages", i, "loop", "until"), stage.loop.until, True, extra))
    retry = stage.on_fail.loop if stage.on_fail is not None else None
    if retry is not None and retry.until is not None:
        extra = {"output", "_result"} | out_fields
        texts.append((("stages", i, "on_fail", "loop", "until"), retry.until, True, extra))
    for field in ("condition", "skip_if"):
        expr = getattr(stage, field)
        if expr is not None:
            texts.append((("stages", i, field), expr, True, set()))
    return texts


def _referenced_stage_ids(spec: Spec, i: int) -> set[str]:
    ids = {s.id for s in spec.stages}
    names: set[str] = set()
    for _path, source, is_expr, extra in stage_templates(spec, i):
        try:
            names |= set(referenced_names(source, expression=is_expr)) - extra
        except TemplateSyntaxError:
            continue
    stage = spec.stages[i]
    if stage.signature is not None:
        names |= set(stage.signature.input)
    if stage.partition_key is not None and stage.partition_source is None:
        names.add(stage.partition_key.split(".", 1)[0])
    return names & ids


def implicit_dependencies(spec: Spec) -> dict[str, list[str]]:
    """Per stage, the stages its templates read that ``depends_on`` does not already make
    upstream: reading a stage's output makes it upstream (as in armature-agents 0.7.0)."""
    post_run = {s.id for s in spec.stages if s.post_run}
    ups = ancestors(spec)
    extra: dict[str, list[str]] = {}
    for i, stage in enumerate(spec.stages):
        if stage.post_run:
            continue
        wanted = _referenced_stage_ids(spec, i) - {stage.id} - post_run
        missing = sorted(wanted - ups.get(stage.id, set()))
        if missing:
            extra[stage.id] = missing
    return extra


def _check_templates(spec: Spec) -> Iterator[Problem]:
    ups = ancestors(spec)
    stages = {s.id: s for s in spec.stages}
    inputs = _input_names(spec)
    for name in inputs:
        if name in stages:
            yield (("inputs",), f"input {name!r} has the same name as a stage; rename one of them")
    prior = spec.continuation.inject_as if spec.continuation else None
    open_inputs = not _declares_inputs(spec)
    schema = spec.inputs_schema
    closed_inputs = (
        not open_inputs and bool(inputs) and "additionalProperties" not in (schema or {})
    )
    for i, stage in enumerate(spec.stages):
        base = set(RUN_VARIABLES) | set(inputs)
        if prior:
            base.add(prior)
        if spec.memory is not None:
            base |= {spec.memory.inject_as, "_stale_memory_keys"}
        if stage.post_run:
            base |= set(POST_RUN_VARIABLES)
            visible = set(stages) - {stage.id}
        else:
            visible = ups.get(stage.id, set())
        if stage.loop is not None:
            base.add(stage.loop.iteration_var)
            base |= set(stage.loop.carry_forward or [])
            if stage.loop.carry_forward is None:
                base |= set(_output_fields(stage) or [])
        hidden: set[str] = set()
        if stage.signature is not None and stage.signature.input:
            keys = set(stage.signature.input)
            hidden = ((set(inputs) | visible) - keys) - set(RUN_VARIABLES)
        never = set(spec.context_policy.never if spec.context_policy else [])
        never |= set(stage.context_policy.never if stage.context_policy else [])
        for layer in spec.context_layers:
            never |= set(layer.never)
        for path, source, is_expr, extra in stage_templates(spec, i):
            if path[-1] == "description":  # signature.input narrows the prompt only
                yield from _check_hidden(path, source, is_expr, hidden - extra)
            yield from _check_hidden(
                path, source, is_expr, never - extra, "context_policy.never hides it"
            )
            yield from _check_one_template(
                path, source, is_expr, base | extra, visible, stages, stage.id, open_inputs
            )
            if closed_inputs and "inputs" not in extra:
                yield from _check_input_fields(path, source, is_expr, inputs)


# Methods a template may call on ``inputs`` (a dict): not input names.
_DICT_METHODS = frozenset({"get", "items", "keys", "values"})


def _check_input_fields(
    path: Path, source: str, is_expr: bool, declared: list[str]
) -> Iterator[Problem]:
    """``inputs.NAME`` (or ``inputs['NAME']``) must name a declared input: a misspelt one
    would fail only at render time, in the middle of a run."""
    try:
        names = referenced_names(source, expression=is_expr)
    except TemplateSyntaxError:
        return  # _check_one_template reports it
    kind = "expression" if is_expr else "template"
    for attr in sorted(names.get("inputs", set()) - set(declared) - _DICT_METHODS):
        yield (
            path,
            f"{kind} reads inputs.{attr}, but the spec declares no input {attr!r}; declared "
            f"inputs: {declared}{did_you_mean(attr, declared)}",
        )


def _optional_inputs(spec: Spec) -> set[str]:
    """Declared inputs that a run may lack: not required and without a default."""
    schema = spec.inputs_schema
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not _declares_inputs(spec) or not isinstance(props, dict):
        return set()
    required = set(schema.get("required") or [])
    return {
        name
        for name, prop in props.items()
        if name not in required and not (isinstance(prop, dict) and "default" in prop)
    }


def _unguarded_inputs(source: str, is_expr: bool, optional: set[str]) -> set[str]:
    """The inputs of ``optional`` that a template reads (``inputs.x``, ``inputs['x']`` or a
    bare ``x``) with no guard for them anywhere in it: a ``| default`` filter, an
    ``is defined`` test or ``inputs.get('x')``."""
    from jinja2 import nodes

    from armature_temporal.spec.templating import environment

    env = environment()
    ast = env.parse("{{ (" + source + ") }}" if is_expr else source)

    def input_name(node: nodes.Node) -> str | None:
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name):
            return node.attr if node.node.name == "inputs" else None
        if (
            isinstance(node, nodes.Getitem)
            and isinstance(node.node, nodes.Name)
            and node.node.name == "inputs"
            and isinstance(node.arg, nodes.Const)
            and isinstance(node.arg.value, str)
        ):
            return node.arg.value
        if isinstance(node, nodes.Name) and node.ctx == "load":
            return node.name
        return None

    guarded: set[str] = set()
    for guard in ast.find_all((nodes.Filter, nodes.Test, nodes.Call)):
        if isinstance(guard, nodes.Call):
            target = guard.node
            if (
                isinstance(target, nodes.Getattr)
                and isinstance(target.node, nodes.Name)
                and target.node.name == "inputs"
                and target.attr == "get"
                and guard.args
                and isinstance(guard.args[0], nodes.Const)
            ):
                guarded.add(str(guard.args[0].value))
            continue
        if isinstance(guard, (nodes.Filter, nodes.Test)) and guard.name in (
            "default",
            "d",
            "defined",
            "undefined",
        ):
            name = input_name(guard.node) if guard.node is not None else None
            if name:
                guarded.add(name)
    free = set(referenced_names(source, expression=is_expr))
    read: set[str] = set()
    for node in ast.find_all((nodes.Getattr, nodes.Getitem, nodes.Name)):
        name = input_name(node)
        if name is None or name not in optional:
            continue
        if isinstance(node, nodes.Name) and name not in free:
            continue  # a local variable of the template, not the input
        read.add(name)
    return read - guarded


def _optional_input_warnings(spec: Spec) -> Iterator[Problem]:
    """Optional inputs read without a default: validate passes, and a run that lacks the
    input fails when the template renders."""
    optional = _optional_inputs(spec)
    if not optional:
        return
    for i in range(len(spec.stages)):
        for path, source, is_expr, extra in stage_templates(spec, i):
            try:
                names = _unguarded_inputs(source, is_expr, optional - extra)
            except TemplateSyntaxError:
                continue
            for name in sorted(names):
                yield (
                    path,
                    f"reads optional input {name!r} (not required, no default), so a run "
                    f"without it fails here; write {{{{ inputs.{name} | default('') }}}}, give "
                    "it a default, or make it required",
                )


def _check_hidden(
    path: Path, source: str, is_expr: bool, hidden: set[str], why: str = ""
) -> Iterator[Problem]:
    """A template may not read what its stage's signature.input (or a never) hides from it."""
    if not hidden:
        return
    try:
        names = set(referenced_names(source, expression=is_expr))
    except TemplateSyntaxError:
        return
    for name in sorted(names & hidden):
        if why:
            yield path, f"reads {name!r}, but {why} from this stage; remove one of them"
            continue
        yield (
            path,
            f"reads {name!r}, which this stage's signature.input leaves out of its context; "
            f"add {name!r} to signature.input",
        )


def _check_one_template(
    path: Path,
    source: str,
    is_expr: bool,
    allowed: set[str],
    visible: set[str],
    stages: dict[str, Stage],
    own_id: str,
    open_inputs: bool = False,
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
            elif stages[name].post_run:
                msg = (
                    f"{kind} reads post_run stage {name!r}, which runs after every other "
                    "stage; only other post_run stages can read it"
                )
            else:
                msg = (
                    f"{kind} reads stage {name!r}, which is not upstream of {own_id!r}, so "
                    f"its output may not exist yet; add {name!r} to depends_on"
                )
            yield path, msg
            continue
        if open_inputs:
            continue  # a run input: spec_warnings says how to declare it
        choices = sorted(allowed | visible)
        yield (
            path,
            f"{kind} uses unknown name {name!r}; available: {choices}{did_you_mean(name, choices)}",
        )


def _output_fields(stage: Stage) -> list[str] | None:
    if stage.role is not None and stage.role.type == "judge" and stage.output_schema is None:
        return ["score", "rationale"]
    if stage.output_mode == "text" and stage.role is not None:
        return ["content"]
    bare_gate = stage.role is None and stage.tool is None and stage.adapter is None
    if stage.gate is not None and bare_gate and stage.subagent_spec is None:
        return ["approved", "feedback", "decision", "comment", "by"]
    return schema_properties(stage.output_schema)


def _check_stage_attrs(path: Path, name: str, attrs: set[str], stage: Stage) -> Iterator[Problem]:
    """Reads of fields an explicit output_schema does not declare (an error); reads of other
    outputs' missing fields are warnings (see :func:`_field_read_warnings`)."""
    fields = schema_properties(stage.output_schema)
    if fields is None or stage.partition_source is not None:
        return
    for attr in sorted(attrs):
        if attr not in fields and attr not in MARKER_FIELDS:
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


def _unregistered_tools(spec: Spec) -> Iterator[Problem]:
    """Tool names that are neither built in nor module:function: a tools: module may register
    them when the worker loads it, so validate warns instead of refusing."""
    hint = (
        " — unless a tools: module registers it"
        if spec.tools
        else "; if a Python module provides it, list the module under tools: [{module: ...}]"
    )
    for i, stage in enumerate(spec.stages):
        if stage.role is not None:
            for k, tool in enumerate(stage.role.tools):
                if msg := tool_problem(tool):
                    yield ("stages", i, "role", "tools", k), msg + hint
        if stage.tool is not None and (msg := tool_problem(stage.tool.name)):
            yield ("stages", i, "tool", "name"), msg + hint


def _rule_field_problem(spec: Spec, tool: str, field: str) -> str | None:
    """Why a safety rule's condition field can never match a call of ``tool``, or None."""
    if field == "_tool_reversibility" or tool == "*":
        return None
    from armature_temporal.tools import tool_arg_fields

    adapter = spec.adapters.get(tool)
    if adapter is not None:
        known: list[str] | None = (
            ["cmd", "argv"] if adapter.type == "script" else ["fn", *adapter.args]
        )
    else:
        known = tool_arg_fields(tool)
    if known is None:
        return None
    root = field.split(".", 1)[0]
    if root in known:
        return None
    return (
        f"tool {tool!r} has no argument {root!r}, so this rule would never match; its "
        f"arguments: {sorted(known)}{did_you_mean(root, sorted(known))}"
    )


def _check_tools_and_rules(spec: Spec) -> Iterator[Problem]:
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
        cond = rule.condition
        if cond is None:
            continue
        if msg := _rule_field_problem(spec, rule.tool, cond.field):
            yield ("safety_rules", r, "condition", "field"), msg
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
        for k, surface in enumerate(si.editable_surfaces):
            sid, _, field = surface.partition(".")
            path = ("self_improvement", "editable_surfaces", k)
            if surface in SURFACE_GROUPS:
                continue  # a 0.7.0 group name; spec_warnings covers those not editable here
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


#: 0.7.0 top-level fields that are accepted but not acted on here, and what to use instead.
_ACCEPTED_ONLY: dict[str, str] = {
    "roles": "a role library used by 0.7.0's export; give each stage its role inline",
    "failures": "documentation in 0.7.0; on_fail and fail_as_value handle failures",
    "file_state": "stages share data through their outputs; use file_read/file_write tools",
    "trace": "every run is traced, always (armature report RUN, armature traces verify)",
    "adapter_factory": "use finetune: (armature finetune) to train LoRA adapters",
    "mcp_servers": "MCP is not supported; expose tools through a tools: module",
    "sandbox": "tools run in a restricted subprocess with no secrets (README: safety)",
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
        if rule.tool == "*" or rule.tool in provided or spec.tools or _PY_TOOL.match(rule.tool):
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


def spec_warnings(spec: Spec) -> list[Problem]:
    """What deserves a look but does not stop a run (validate prints them and exits 0)."""
    warnings: list[Problem] = []
    warnings += _bare_input_warnings(spec)
    warnings += _optional_input_warnings(spec)
    warnings += _field_read_warnings(spec)
    warnings += _shape_warnings(spec)
    warnings += _unregistered_tools(spec)
    for key, instead in _ACCEPTED_ONLY.items():
        value = getattr(spec, key)
        if value:
            warnings.append(
                ((key,), f"accepted from armature-agents 0.7.0 but not used: {instead}")
            )
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
        for key in ("db", "extract_knowledge", "reconcile_llm", "navigation_tools"):
            default = type(memory).model_fields[key].default
            if getattr(memory, key) != default:
                warnings.append(
                    (
                        ("memory", key),
                        "accepted but not used: memory lives in the trace store and holds the "
                        "captured values only",
                    )
                )
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
        if si.drift_threshold is not None:
            warnings.append(
                (
                    ("self_improvement", "drift_threshold"),
                    "accepted but not used yet: drift scoring is not implemented",
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
