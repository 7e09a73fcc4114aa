"""Files a spec names besides subagent specs: agent bundles (``agent_library`` + ``agent:``),
skill text files (``skill_library.*.path``) and context layer files (``context_layers[].src``).

The loader reads them once, at load time, and puts their content into the spec, so a compiled
Plan is self-contained (the workflow never reads files) and its hash changes when they do. Each
is read through :func:`armature_temporal.spec.files.read_spec_file`: only inside the spec's
folder tree, only a regular file, at most :data:`MAX_RESOURCE_BYTES` counted by reading.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml.error import YAMLError

from armature_temporal.errors import did_you_mean
from armature_temporal.spec.files import SpecFileRefused, SpecRoots, read_spec_file
from armature_temporal.spec.models import Role, SafetyRule, SkillDef, Spec
from armature_temporal.spec.yaml_limits import YAMLLimitError, bounded_yaml

__all__ = ["MAX_RESOURCE_BYTES", "attach_resources"]

MAX_RESOURCE_BYTES = 512 * 1024

Problem = tuple[tuple[str | int, ...], str]


def attach_resources(
    spec: Spec, base_dir: Path, roots: SpecRoots | None = None
) -> tuple[Spec, list[Problem]]:
    """The spec with agent roles, skill texts and layer texts filled in, and the problems
    (missing, unreadable or refused files, invalid bundles). Paths are relative to
    ``base_dir`` and must lie within ``roots`` (default: ``base_dir``'s tree)."""
    roots = roots if roots is not None else SpecRoots.of(base_dir)
    problems: list[Problem] = []
    skills = dict(spec.skill_library)
    rules: list[SafetyRule] = []
    for key, skill in spec.skill_library.items():
        updates: dict[str, Any] = {}
        if skill.id is None:
            updates["id"] = key
        if skill.path is not None:
            text = _read(roots, base_dir, skill.path, ("skill_library", key, "path"), problems)
            if text is not None:
                updates["content"] = text.strip()
        if updates:
            skills[key] = skill.model_copy(update=updates)
    layers = []
    for i, layer in enumerate(spec.context_layers):
        if layer.src is not None:
            text = _read(roots, base_dir, layer.src, ("context_layers", i, "src"), problems)
            layer = layer.model_copy(update={"content": (text or "").strip()})
        layers.append(layer)
    stages = []
    for i, stage in enumerate(spec.stages):
        if stage.agent is None:
            stages.append(stage)
            continue
        path = ("stages", i, "agent")
        ref = spec.agent_library.get(stage.agent)
        if ref is None:
            known = sorted(spec.agent_library)
            problems.append(
                (
                    path,
                    f"unknown agent {stage.agent!r}; agent_library has {known}"
                    + did_you_mean(stage.agent, known),
                )
            )
            stages.append(stage)
            continue
        bundle = _read_bundle(roots, base_dir, ref.path, path, problems)
        if bundle is None:
            stages.append(stage)
            continue
        role, bundle_skills, bundle_rules = bundle
        for key, skill in bundle_skills.items():
            skills.setdefault(key, skill)
        rules += bundle_rules
        stages.append(stage.model_copy(update={"role": role}))
    update: dict[str, Any] = {"stages": stages, "skill_library": skills, "context_layers": layers}
    if rules:
        # An agent's rules are a floor: they come first, and the first matching rule wins.
        update["safety_rules"] = [*rules, *spec.safety_rules]
    return spec.model_copy(update=update), problems


def _read(
    roots: SpecRoots,
    base_dir: Path,
    relative: str,
    path: tuple[str | int, ...],
    problems: list[Problem],
) -> str | None:
    try:
        return read_spec_file(roots, base_dir, relative, MAX_RESOURCE_BYTES)
    except SpecFileRefused as exc:
        problems.append((path, str(exc)))
        return None


def _read_bundle(
    roots: SpecRoots,
    base_dir: Path,
    relative: str,
    path: tuple[str | int, ...],
    problems: list[Problem],
) -> tuple[Role, dict[str, SkillDef], list[SafetyRule]] | None:
    text = _read(roots, base_dir, relative, path, problems)
    if text is None:
        return None
    try:
        data = bounded_yaml("safe", MAX_RESOURCE_BYTES).load(text)
    except YAMLLimitError as exc:
        mark = exc.problem_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problems.append((path, f"agent bundle {relative!r}{where}: {exc.problem}"))
        return None
    except YAMLError as exc:
        problems.append((path, f"agent bundle {relative!r} is not valid YAML: {exc}"))
        return None
    if not isinstance(data, dict) or not isinstance(data.get("role"), dict):
        problems.append((path, f"agent bundle {relative!r} needs a role: mapping"))
        return None
    try:
        role = Role.model_validate(data["role"])
        skills = {
            k: SkillDef.model_validate(v).model_copy(update={"id": k})
            for k, v in (data.get("skill_library") or {}).items()
        }
        rules = [SafetyRule.model_validate(r) for r in data.get("safety_rules") or []]
    except (ValidationError, AttributeError, TypeError) as exc:
        problems.append((path, f"agent bundle {relative!r} is invalid: {exc}"))
        return None
    # A bundle's skill files are relative to the bundle (as 0.7.0 resolved them), and confined
    # to the same tree as everything the spec names.
    bundle_dir = (base_dir / relative).parent
    for key, skill in skills.items():
        if skill.path is not None:
            text = _read(roots, bundle_dir, skill.path, path, problems)
            if text is None:
                return None
            skills[key] = skill.model_copy(update={"content": text.strip()})
    return role, skills, rules
