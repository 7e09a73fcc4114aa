"""Load spec files: YAML (ruamel, with positions) → :class:`Spec`, with every problem reported.

Errors name ``file:line:column``, the field path, the value and the fix. The loader collects
all problems it can before raising one :class:`SpecError`, and it raises nothing else, whatever
the input (a property test holds it to that).
"""

from __future__ import annotations

import datetime as dt
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml.comments import CommentedBase, CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from armature_temporal.errors import SpecError, SpecIssue, did_you_mean
from armature_temporal.spec.checks import check_spec
from armature_temporal.spec.fields import FieldValueError
from armature_temporal.spec.files import SpecFileRefused, SpecRoots, roots_of, spec_file_path
from armature_temporal.spec.models import Spec
from armature_temporal.spec.references import implicit_dependencies
from armature_temporal.spec.resources import attach_resources
from armature_temporal.spec.salvage import Salvaged, allowed_fields, salvage
from armature_temporal.spec.warnings import spec_warnings
from armature_temporal.spec.yaml_limits import YAMLLimitError, bounded_yaml, text_bytes

__all__ = ["LoadedSpec", "format_path", "load_spec", "load_spec_text"]

#: The largest spec, from a file or as text; aliases are bounded too (see ``yaml_limits``).
MAX_SPEC_BYTES = 2 * 1024 * 1024


@dataclass
class LoadedSpec:
    """A validated spec with the subagent specs it references, keyed by stage id.

    ``implicit`` holds, per stage id, the dependencies its templates imply (already added to
    the spec's ``depends_on``); ``warnings`` what deserves a look but does not stop a run."""

    spec: Spec
    source: str
    children: dict[str, LoadedSpec] = field(default_factory=dict)
    implicit: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[SpecIssue] = field(default_factory=list)
    #: An issue at a field path of this spec's text, with its line and column (planning finds
    #: some problems: an MCP server's tools).
    locate: Callable[[Sequence[str | int], str], SpecIssue] | None = field(
        default=None, repr=False, compare=False
    )

    def issue(self, path: Sequence[str | int], message: str) -> SpecIssue:
        if self.locate is not None:
            return self.locate(path, message)
        return SpecIssue(self.source, 0, 0, format_path(path), message)


def format_path(path: Sequence[str | int]) -> str:
    """``("stages", 2, "role")`` → ``stages[2].role``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def load_spec(path: str | Path) -> LoadedSpec:
    """Load, validate and cross-check a spec file and its subagent specs.

    The files it names (subagent specs, skill, context and agent files, and theirs) must lie
    in this file's folder tree (see :mod:`armature_temporal.spec.files`).

    Raises:
        SpecError: With every problem found, in this file and in the files it references.
    """
    return _load_file(Path(path), str(path), (), roots_of(Path(path).parent, str(path)))


def load_spec_text(
    text: str, filename: str = "<string>", base_dir: str | Path | None = None
) -> LoadedSpec:
    """Load a spec from text. The files it names resolve against ``base_dir`` (default: the
    working directory) and must lie in its tree.

    The text is held to the same limits as a file: ``MAX_SPEC_BYTES`` (UTF-8) and bounded
    YAML alias expansion."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    return _load_text(text, filename, base, (), roots_of(base, filename))


def _load_file(path: Path, display: str, stack: tuple[Path, ...], roots: SpecRoots) -> LoadedSpec:
    """Read at most ``MAX_SPEC_BYTES`` characters (plus one, to tell a larger file), and only
    from a regular file: ``/dev/zero`` or a FIFO would never end, or block on opening."""

    def too_big(size: str) -> SpecError:
        return _too_big(display, "file", size)

    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(str(path))
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(
                [
                    SpecIssue(
                        display,
                        0,
                        0,
                        "",
                        "not a regular file (a device, FIFO or socket); give the path of a "
                        "spec file",
                    )
                ]
            )
        if info.st_size > MAX_SPEC_BYTES:
            raise too_big(str(info.st_size))
        with path.open(encoding="utf-8") as handle:
            text = handle.read(MAX_SPEC_BYTES + 1)
        if len(text) > MAX_SPEC_BYTES:  # it grew after stat
            raise too_big(f"over {MAX_SPEC_BYTES}")
    except FileNotFoundError:
        raise SpecError([SpecIssue(display, 0, 0, "", "no such file; check the path")]) from None
    except IsADirectoryError:
        raise SpecError([SpecIssue(display, 0, 0, "", "is a directory, not a spec file")]) from None
    except UnicodeDecodeError as exc:
        raise SpecError(
            [SpecIssue(display, 0, 0, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
        ) from None
    except OSError as exc:
        raise SpecError([SpecIssue(display, 0, 0, "", f"cannot read: {exc.strerror}")]) from None
    return _load_text(text, display, path.parent, (*stack, path.resolve()), roots)


def _load_text(
    text: str, display: str, base_dir: Path, stack: tuple[Path, ...], roots: SpecRoots
) -> LoadedSpec:
    root = _parse_yaml(text, display)
    locate = _Locator(root, display)
    data = _plain(root, (), locate)
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise SpecError(
            [
                locate.issue(
                    (),
                    f"a spec is a YAML mapping (name:, stages:, ...), but this document is {kind}",
                )
            ]
        )
    issues: list[SpecIssue] = []
    salvaged: Salvaged | None = None
    early_warnings = [locate.issue(p, m) for p, m in _render_load_time(data)]
    try:
        spec = Spec.model_validate(data)
    except ValidationError as exc:
        issues = [_issue_from_pydantic(err, locate) for err in exc.errors()]
        salvaged = salvage(data, exc)
        if salvaged is None or salvaged.spec is None:
            raise SpecError(issues) from None
        spec = salvaged.spec
    spec, resource_problems = attach_resources(spec, base_dir, roots)
    issues += [locate.issue(path, msg) for path, msg in resource_problems]
    implicit = implicit_dependencies(spec)
    if implicit:
        spec = _with_dependencies(spec, implicit)
    for path, msg in check_spec(spec, skip=salvaged.skip if salvaged is not None else set()):
        if salvaged is not None and salvaged.set_aside(path):
            continue  # about a placeholder the repair put there, not the user's text
        issues.append(locate.issue(path, msg))
    warnings = (
        [] if issues else early_warnings + [locate.issue(p, m) for p, m in spec_warnings(spec)]
    )
    named = spec.self_improvement.cases if spec.self_improvement is not None else None
    if named is not None and (problem := _cases_problem(named, base_dir, roots)) is not None:
        issues.append(locate.issue(("self_improvement", "cases"), problem))
    children: dict[str, LoadedSpec] = {}
    for i, stage in enumerate(spec.stages):
        if stage.subagent_spec is None:
            continue
        path = ("stages", i, "subagent_spec")
        child_path = base_dir / stage.subagent_spec
        try:  # in the top-level spec's folder tree, a regular file
            resolved = spec_file_path(roots, base_dir, stage.subagent_spec)
        except SpecFileRefused as exc:
            issues.append(locate.issue(path, str(exc)))
            continue
        if resolved in stack:
            chain = " -> ".join(p.name for p in (*stack, resolved))
            issues.append(
                locate.issue(
                    path,
                    f"subagent cycle across files: {chain}; a spec cannot run itself as a subagent",
                )
            )
            continue
        try:
            children[stage.id] = _load_file(resolved, str(child_path), stack, roots)
            warnings += children[stage.id].warnings
        except SpecError as exc:
            issues.append(
                locate.issue(
                    path,
                    f"subagent spec {stage.subagent_spec!r} is "
                    f"invalid ({len(exc.issues)} problem(s) listed)",
                )
            )
            issues.extend(exc.issues)
    if issues:
        # This file's problems in line order; a subagent file's follow in its own order.
        own = sorted((i for i in issues if i.file == display), key=lambda i: (i.line, i.column))
        raise SpecError(own + [i for i in issues if i.file != display])
    return LoadedSpec(
        spec=spec,
        source=display,
        children=children,
        implicit=implicit,
        warnings=warnings,
        locate=locate.issue,
    )


def _cases_problem(relative: str, base_dir: Path, roots: SpecRoots) -> str | None:
    """Why ``self_improvement.cases`` cannot be used (None: it can): a cases file in the
    spec's folder tree that loads (what the cases ask of the spec is checked by a round)."""
    from armature_temporal.evals.cases import CasesError, load_cases

    try:
        resolved = spec_file_path(roots, base_dir, relative)
    except SpecFileRefused as exc:
        return f"cases file {relative!r}: {exc}"
    try:
        load_cases(resolved)
    except CasesError as exc:
        return f"cases file {relative!r} is not a valid cases file: {exc}"
    return None


def _render_load_time(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """0.7.0 specs may template their structure (``name: "{{ name | default('x') }}"``), which
    its loader rendered with caller-supplied vars. Here ``name``, ``version`` and the tiers'
    fields are rendered once at load time with no vars, so their defaults apply; a template
    that gives nothing is left for validation to report. Returns warnings saying so."""
    from jinja2 import TemplateError

    from armature_temporal.spec.templating import environment

    places: list[tuple[dict[str, Any], str, tuple[str | int, ...]]] = [
        (data, key, (key,)) for key in ("name", "version")
    ]
    tiers = data.get("model_tiers")
    if isinstance(tiers, dict):
        for tier_name, tier in tiers.items():
            if isinstance(tier, dict):
                places += [(tier, k, ("model_tiers", tier_name, k)) for k in tier]
    warnings = []
    for holder, key, path in places:
        value = holder.get(key)
        if not isinstance(value, str) or "{{" not in value:
            continue
        try:
            rendered = environment().from_string(value).render().strip()
        except TemplateError:
            continue
        if rendered:
            holder[key] = rendered
            warnings.append(
                (
                    path,
                    f"a load-time template (0.7.0 spec vars): {value!r} is rendered once, "
                    f"with its defaults, to {rendered!r}; write the value itself",
                )
            )
    return warnings


def _with_dependencies(spec: Spec, extra: dict[str, list[str]]) -> Spec:
    stages = [
        stage.model_copy(update={"depends_on": [*stage.depends_on, *extra[stage.id]]})
        if stage.id in extra
        else stage
        for stage in spec.stages
    ]
    return spec.model_copy(update={"stages": stages})


def _too_big(display: str, what: str, size: str) -> SpecError:
    return SpecError(
        [
            SpecIssue(
                display,
                0,
                0,
                "",
                f"{what} is {size} bytes; specs are limited to {MAX_SPEC_BYTES} bytes "
                "(move long texts into skill or context files the spec references)",
            )
        ]
    )


def _parse_yaml(text: str, display: str) -> Any:
    if len(text) > MAX_SPEC_BYTES:  # over the cap whatever the encoding; don't encode it all
        raise _too_big(display, "text", f"over {MAX_SPEC_BYTES}")
    if text_bytes(text) > MAX_SPEC_BYTES:
        raise _too_big(display, "text", str(text_bytes(text)))
    yaml = bounded_yaml("rt", MAX_SPEC_BYTES)
    yaml.allow_duplicate_keys = False
    try:
        return yaml.load(text)
    except YAMLLimitError as exc:
        mark = exc.problem_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        raise SpecError([SpecIssue(display, line, col, "", str(exc.problem))]) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        problem = exc.problem or exc.context or "invalid YAML"
        if "found duplicate key" in str(exc):
            problem = f"{problem.strip()}; each key may appear once in a mapping"
        raise SpecError([SpecIssue(display, line, col, "", f"YAML syntax: {problem}")]) from None
    except (
        YAMLError,
        ValueError,
        TypeError,
        AttributeError,
        RecursionError,
        IndexError,
        KeyError,
        OverflowError,
        AssertionError,
    ) as exc:
        # ruamel raises several plain exception types on unusual input (odd tags, bad
        # escapes, huge numbers); all of them mean the text is not a spec we can read.
        raise SpecError(
            [SpecIssue(display, 0, 0, "", f"YAML could not be read: {type(exc).__name__}: {exc}")]
        ) from None


class _Locator:
    """Finds the line and column of a field path in the ruamel document."""

    def __init__(self, root: Any, display: str) -> None:
        self.root = root
        self.display = display

    def position(self, path: Sequence[str | int]) -> tuple[int, int]:
        node = self.root
        line, col = 0, 0
        if isinstance(node, CommentedBase):
            line, col = _one_based(node.lc.line, node.lc.col, (0, 0))
        for part in path:
            try:
                if isinstance(node, CommentedMap) and part in node:
                    pos = node.lc.key(part)
                    node = node[part]
                elif (
                    isinstance(node, CommentedSeq)
                    and isinstance(part, int)
                    and 0 <= part < len(node)
                ):
                    pos = node.lc.item(part)
                    node = node[part]
                else:
                    break
            except (KeyError, TypeError, AttributeError, IndexError):
                break
            line, col = _one_based(pos[0], pos[1], (line, col))
        return line, col

    def issue(self, path: Sequence[str | int], message: str) -> SpecIssue:
        line, col = self.position(path)
        return SpecIssue(self.display, line, col, format_path(path), message)


def _one_based(line: Any, col: Any, fallback: tuple[int, int]) -> tuple[int, int]:
    if isinstance(line, int) and isinstance(col, int):
        return line + 1, col + 1
    return fallback


def _plain(
    node: Any, path: tuple[str | int, ...], locate: _Locator, active: frozenset[int] = frozenset()
) -> Any:
    """ruamel's node types → plain JSON-like Python; raises SpecError on what a spec can't hold."""
    if isinstance(node, Mapping):
        if id(node) in active:
            raise SpecError(
                [
                    locate.issue(
                        path,
                        "recursive YAML alias (an anchor that contains "
                        "itself); write the value out",
                    )
                ]
            )
        inner = active | {id(node)}
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                raise SpecError(
                    [
                        locate.issue(
                            path, f"mapping key {_short(key)} is not text; quote it, e.g. '1': ..."
                        )
                    ]
                )
            out[str(key)] = _plain(value, (*path, key), locate, inner)
        return out
    if isinstance(node, list | tuple):
        if id(node) in active:
            raise SpecError(
                [
                    locate.issue(
                        path,
                        "recursive YAML alias (an anchor that contains "
                        "itself); write the value out",
                    )
                ]
            )
        inner = active | {id(node)}
        return [_plain(v, (*path, i), locate, inner) for i, v in enumerate(node)]
    if node is None or isinstance(node, bool):
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, dt.date | dt.datetime):
        return node.isoformat()
    if isinstance(node, set | frozenset):
        raise SpecError([locate.issue(path, "YAML sets (!!set) are not supported; use a list")])
    raise SpecError(
        [
            locate.issue(
                path,
                f"unsupported YAML value {_short(node)} "
                f"({type(node).__name__}); use plain text, numbers, "
                "lists and mappings",
            )
        ]
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _issue_from_pydantic(err: Any, locate: _Locator) -> SpecIssue:
    loc: tuple[str | int, ...] = tuple(err["loc"])
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        allowed = allowed_fields(loc[:-1])
        key = loc[-1]
        return locate.issue(
            loc, f"unknown field {key!r}; allowed here: {allowed}{did_you_mean(key, allowed)}"
        )
    if kind == "missing":
        return locate.issue(loc[:-1] if loc else loc, f"missing required field {loc[-1]!r}")
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    raised = err.get("ctx", {}).get("error")
    if isinstance(raised, FieldValueError):  # about one field: point at its own line
        return locate.issue((*loc, raised.field), msg)
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        msg = f"{_short(value)} is not one of {expected}{_literal_hint(value, expected)}"
    elif kind == "string_pattern_mismatch" and loc and loc[-1] == "id":
        msg = (
            f"stage id {_short(value)} must be letters, digits and underscores, starting "
            "with a letter or _ (templates refer to it as {{ id.field }})"
        )
    elif kind == "string_pattern_mismatch" and loc == ("name",):
        msg = (
            f"spec name {_short(value)} must start with a letter or digit and use letters, "
            "digits, '.', '_' or '-' (it names the runs), at most 100 characters"
        )
    elif not isinstance(value, dict | list) and "input" in err and kind != "value_error":
        msg = f"{msg}; got {_short(value)}"
    return locate.issue(loc, msg)


def _literal_hint(value: Any, expected: str) -> str:
    choices = [c.strip().strip("'") for c in expected.replace(" or ", ",").split(",")]
    return did_you_mean(value, [c for c in choices if c])
