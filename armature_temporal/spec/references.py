"""What templates read: the names and fields each stage's templates use, the dependencies those
reads imply, and the checks on them (unknown names, fields an output does not have, inputs a
spec does not declare, what signature.input or context_policy.never hide).

Each check yields ``(path, message)``, like :mod:`armature_temporal.spec.checks`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from jinja2 import TemplateSyntaxError

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.models import Spec, Stage, unwrap_expression
from armature_temporal.spec.templating import referenced_names

#: A field path in the spec document (``("stages", 2, "role", "model_tier")``) and a problem
#: found at it; the loader turns the path into ``file:line:column``.
Path = tuple[str | int, ...]
Problem = tuple[Path, str]

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


#: Fields every stage output may carry besides its own: skipped and failed-as-value markers.
MARKER_FIELDS: tuple[str, ...] = ("_skipped", "_failed", "error", "error_type")


POST_RUN_VARIABLES: tuple[str, ...] = ("_transcript", "_diagnostics")


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


def schema_properties(schema: dict[str, Any] | None) -> list[str] | None:
    """Declared top-level property names, or None when the schema does not pin them."""
    if not schema or not isinstance(schema.get("properties"), dict):
        return None
    return list(schema["properties"])


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
    if stage.retrieve is not None:
        texts.append((("stages", i, "retrieve", "query"), stage.retrieve.query, False, item))
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
        # the iteration's output also under the stage's own id, as 0.7.0 specs write it
        extra = {"output", "_result", stage.id} | out_fields
        texts.append((("stages", i, "loop", "until"), stage.loop.until, True, extra))
    retry = stage.on_fail.loop if stage.on_fail is not None else None
    if retry is not None and retry.until is not None:
        extra = {"output", "_result", stage.id} | out_fields
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


#: Where a name nothing provides renders empty (false), as 0.7.0's guide documents: a
#: warning there, not an error.
EMPTY_WHEN_ABSENT = ("condition", "skip_if")


def absent_name_warnings(spec: Spec) -> Iterator[Problem]:
    """A ``condition``/``skip_if`` naming nothing the spec has (no stage, input or run
    variable): it renders empty, so the condition is false, as in armature-agents 0.7.0."""
    return _check_templates(spec, absent_only=True)


def _check_templates(spec: Spec, absent_only: bool = False) -> Iterator[Problem]:
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
            if spec.memory.keeps_facts:
                base.add(spec.memory.inject_knowledge_as)
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
            lenient = path[-1] in EMPTY_WHEN_ABSENT
            if absent_only and not lenient:
                continue
            if not absent_only:
                if path[-1] == "description":  # signature.input narrows the prompt only
                    yield from _check_hidden(path, source, is_expr, hidden - extra)
                yield from _check_hidden(
                    path, source, is_expr, never - extra, "context_policy.never hides it"
                )
            yield from _check_one_template(
                path,
                source,
                is_expr,
                base | extra,
                visible,
                stages,
                stage.id,
                open_inputs,
                absent="only" if absent_only else "skip" if lenient else "error",
            )
            if absent_only:
                continue
            if closed_inputs and "inputs" not in extra:
                yield from _check_input_fields(path, source, is_expr, inputs)


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
    absent: Literal["error", "skip", "only"] = "error",
) -> Iterator[Problem]:
    """Problems with the names a template reads. ``absent``: what to do about a name nothing
    provides: an error, nothing (``skip``), or report only those (``only``, as warnings)."""
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
        if absent == "only":
            if name not in visible and name not in stages and not open_inputs:
                choices = sorted(allowed | visible)
                yield (
                    path,
                    f"{kind} reads {name!r}, which no stage, input or run variable provides: "
                    f"it renders empty, so the {path[-1]} is false (as in armature-agents "
                    f"0.7.0){did_you_mean(name, choices)}",
                )
            continue
        if name in visible:
            yield from _check_stage_attrs(path, name, attrs, stages[name])
            continue
        if name in stages:
            if name == own_id:
                msg = (
                    f"{kind} reads the stage's own output {name!r}; only its loop.until "
                    "(or on_fail.loop.until, and gate.message as 'output') can, since "
                    "elsewhere it does not exist yet"
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
        if open_inputs or absent == "skip":
            continue  # a run input (spec_warnings says how to declare it), or empty
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
