"""The armature-agents 0.7.0 spec corpus (tests/fixtures/legacy, issue 12) loads and compiles
here, and the part written for it (own/) uses every field of 0.7.0's spec models.

The corpus: shipped/ (the specs the 0.7.0 package ships), guide/ (every complete example of its
documents that 0.7.0 accepts, and the design documents' two acceptance specs) and own/ (specs
written in the 0.7.0 format to cover its fields). Each corpus folder's top-level ``*.yaml`` and
``*.yml`` files are the specs; subfolders hold what they use (child specs, agent bundles, skill
and layer files). tests/fixtures/legacy/README.md says where each file comes from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from armature_temporal.errors import SpecError
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec

LEGACY = Path(__file__).resolve().parents[1] / "fixtures" / "legacy"
CORPORA = ("shipped", "guide", "own")


def corpus_specs(*corpora: str) -> list[Path]:
    """The spec files of the named corpus folders (all of them by default), sorted."""
    found: list[Path] = []
    for corpus in corpora or CORPORA:
        folder = LEGACY / corpus
        found += [p for p in folder.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml")]
    return sorted(found)


def corpus_id(path: Path) -> str:
    return path.relative_to(LEGACY).as_posix()


# ----------------------------------------------------------------------------------------------
# Every corpus spec loads (no SpecError) and compiles.


@pytest.mark.parametrize("path", corpus_specs(), ids=corpus_id)
def test_corpus_spec_loads_and_compiles(path: Path) -> None:
    loaded = load_spec(path)
    if loaded.spec.mcp_servers:
        # Planning lists an MCP server's tools; the servers these specs name do not exist here,
        # and each is an error at its own line (tests/workflows/test_mcp_tools.py runs real ones)
        with pytest.raises(SpecError) as caught:
            compile_spec(loaded)
        paths = sorted(i.path for i in caught.value.issues)
        assert paths == [f"mcp_servers[{i}]" for i in range(len(loaded.spec.mcp_servers))]
        return
    plan = compile_spec(loaded)
    assert plan.name == loaded.spec.name
    assert {s.id for s in loaded.spec.stages} <= {s.id for s in plan.stages}


def test_the_corpus_is_all_there() -> None:
    """Files cannot drop out of the corpus unnoticed (the README lists each one)."""
    counts = {corpus: len(corpus_specs(corpus)) for corpus in CORPORA}
    assert counts == {"shipped": 12, "guide": 24, "own": 5}
    readme = (LEGACY / "README.md").read_text(encoding="utf-8")
    for path in corpus_specs():
        assert path.name in readme, f"{corpus_id(path)} is not listed in the fixture README"


# ----------------------------------------------------------------------------------------------
# The own/ corpus covers every field of 0.7.0's models.
#
# armature/spec/models.py of armature-agents 0.7.0, as data: for each model, its fields and what
# each holds: None (a value), "M" (a nested model M), "[M]" (a list of M), "{M}" (a mapping of
# names to M). "Trigger" is 0.7.0's TriggerConfig union, told apart by its `type`; "*" under
# ModelTiers is a tier with a name of its own (0.7.0 allowed extra tier names).

OLD_MODELS: dict[str, dict[str, str | None]] = {
    "HarnessSpec": {
        "name": None,
        "version": None,
        "description": None,
        "mission": None,
        "context_layers": "[ContextLayer]",
        "context_policy": "ContextPolicy",
        "checkpoint": None,
        "contracts": "Contract",
        "roles": "{Role}",
        "stages": "[Stage]",
        "adapters": "{Adapter}",
        "failures": "{Failure}",
        "model_tiers": "ModelTiers",
        "role_type_defaults": "RoleTypeDefaults",
        "file_state": "FileState",
        "trace": "TraceConfig",
        "safety_rules": "[ToolSafetyRule]",
        "safety_mode": None,
        "memory": "MemoryConfig",
        "continuation": "ContinuationConfig",
        "triggers": "[Trigger]",
        "tools": "[ToolModule]",
        "skill_library": "{SkillDef}",
        "agent_library": "{AgentRef}",
        "adapter_factory": "AdapterFactoryConfig",
        "mcp_servers": "[MCPServerConfig]",
        "sandbox": "SandboxConfig",
        "self_improvement": "SelfImprovementConfig",
        "destinations": "SpecDestinations",
        "closure": "ClosureConfig",
        "mission_source": None,
    },
    "ModelTiers": {
        "tiny": "ModelTierConfig",
        "small": "ModelTierConfig",
        "medium": "ModelTierConfig",
        "large": "ModelTierConfig",
        "frontier": "ModelTierConfig",
        "*": "ModelTierConfig",
    },
    "ModelTierConfig": {
        "provider": None,
        "model": None,
        "api_base": None,
        "api_key_env": None,
        "temperature": None,
        "max_tokens": None,
        "tool_calling": None,
        "adapter_support": None,
        "adapter_path_template": None,
    },
    "RoleTypeDefaults": {"worker": None, "orchestrator": None, "judge": None, "researcher": None},
    "Contract": {
        "inputs": None,
        "outputs": None,
        "completion": None,
        "max_iterations": None,
        "max_llm_calls": None,
        "timeout_hours": None,
        "output_max_chars": None,
    },
    "Signature": {"input": None, "output": None},
    "ContextLayer": {"name": None, "precedence": None, "content": None, "src": None, "never": None},
    "ContextPolicy": {"must": None, "never": None},
    "Role": {
        "name": None,
        "type": None,
        "description": None,
        "tools": None,
        "skills": None,
        "model_tier": None,
        "temperature": None,
        "max_tokens": None,
    },
    "LoopConfig": {
        "stage": None,
        "context": None,
        "max": None,
        "until": None,
        "backoff_s": None,
        "backoff_max_s": None,
    },
    "OnFailConfig": {"loop": "LoopConfig"},
    "IterationConfig": {
        "max_iterations": None,
        "until": None,
        "carry_forward": None,
        "iteration_var": None,
        "backoff_s": None,
        "backoff_max_s": None,
    },
    "Adapter": {
        "name": None,
        "type": None,
        "fn": None,
        "cmd": None,
        "args": None,
        "timeout": None,
        "parse": None,
    },
    "Failure": {"condition": None, "recovery": None, "max_retries": None},
    "SafetyCondition": {"field": None, "op": None, "value": None},
    "ToolSafetyRule": {
        "tool": None,
        "condition": "SafetyCondition",
        "action": None,
        "message": None,
    },
    "FileState": {"enabled": None, "base": None, "workspace": None, "manifest": None},
    "Stage": {
        "id": None,
        "role": "Role",
        "depends_on": None,
        "adapter": None,
        "gate": None,
        "tool_call": "ToolCallConfig",
        "signature": "Signature",
        "output_mode": None,
        "on_fail": "OnFailConfig",
        "present": None,
        "condition": None,
        "skip_if": None,
        "timeout_s": None,
        "fail_as_value": None,
        "output_schema": None,
        "subagent_spec": None,
        "subagent_spec_path": None,
        "isolated": None,
        "fan_out": None,
        "fan_in": None,
        "partition_key": None,
        "partition_source": None,
        "inject_file_as": None,
        "output_max_chars": None,
        "evaluate": None,
        "post_run": None,
        "response_stage": None,
        "sandbox_image": None,
        "loop": "IterationConfig",
        "agent": None,
        "context_policy": "ContextPolicy",
    },
    "TraceConfig": {"enabled": None, "metrics": None, "filesystem": None},
    "MemoryCapture": {"stage": None, "key": None, "max_entries": None},
    "MemoryConfig": {
        "enabled": None,
        "fresh": None,
        "capture": "[MemoryCapture]",
        "inject_as": None,
        "db": None,
        "workflow_name": None,
        "extract_knowledge": None,
        "inject_knowledge_as": None,
        "reconcile": None,
        "reconcile_llm": None,
        "navigation_tools": None,
    },
    "ToolModule": {"module": None, "api_key_env": None},
    "ToolCallConfig": {"name": None, "args": None},
    "SkillAdapterRef": {"name": None, "version": None, "fallback": None, "inject_metadata": None},
    "SkillDef": {
        "id": None,
        "description": None,
        "content": None,
        "path": None,
        "adapter": "SkillAdapterRef",
    },
    "AgentRef": {"path": None, "version": None},
    "CompiledAgent": {
        "role": "Role",
        "skill_library": "{SkillDef}",
        "safety_rules": "[ToolSafetyRule]",
    },
    "AdapterSchedule": {
        "min_new_traces": None,
        "max_age_days": None,
        "quality_drift_threshold": None,
    },
    "AdapterPromotionPolicy": {
        "min_cng": None,
        "min_hqs_delta": None,
        "require_manual_review": None,
    },
    "AdapterFactorySkillOverride": {
        "backend": None,
        "base_model": None,
        "rank": None,
        "alpha": None,
        "target_modules": None,
        "use_dora": None,
        "continual_learning": "ContinualLearningConfig",
        "schedule": "AdapterSchedule",
    },
    "ContinualLearningConfig": {
        "enabled": None,
        "prior_version": None,
        "orthogonality_lambda": None,
        "freeze_old_routing": None,
        "init_delta_near_zero": None,
    },
    "AdapterFactoryConfig": {
        "backend": None,
        "base_model": None,
        "rank": None,
        "alpha": None,
        "target_modules": None,
        "use_dora": None,
        "continual_learning": "ContinualLearningConfig",
        "max_tokens_per_example": None,
        "output_max_tokens": None,
        "schedule": "AdapterSchedule",
        "promotion_policy": "AdapterPromotionPolicy",
        "skills": "{AdapterFactorySkillOverride}",
    },
    "MCPServerConfig": {
        "name": None,
        "transport": None,
        "command": None,
        "args": None,
        "url": None,
        "headers": None,
        "env": None,
        "timeout_s": None,
    },
    "SandboxConfig": {
        "mode": None,
        "image": None,
        "timeout_s": None,
        "allow_network": None,
        "workspace": None,
        "host_workspace": None,
        "env": None,
        "cpu_limit": None,
        "memory_limit": None,
        "runtime": None,
        "platform": None,
    },
    "ContinuationKey": {"key": None},
    "ContinuationConfig": {"carry_forward": "[ContinuationKey]", "inject_as": None},
    "SelfImprovementConfig": {
        "editable_surfaces": None,
        "target_hqs": None,
        "min_traces": None,
        "drift_threshold": None,
    },
    "CronTrigger": {"type": None, "schedule": None},
    "WebhookTrigger": {"type": None, "path": None},
    "SpecArtifact": {"stage_id": None, "name": None, "format": None, "source": None},
    "SpecDestinations": {"artifacts": "[SpecArtifact]", "include_trace": None},
    "ClosureConfig": {"stage": None},
}

#: Values of 0.7.0's enumerations that the own/ corpus must use, each at least once.
OLD_VALUES: dict[tuple[str, str], set[Any]] = {
    ("Role", "type"): {"worker", "orchestrator", "judge", "researcher"},
    ("Stage", "output_mode"): {"text", "json", "guided_json"},
    ("Stage", "fan_in"): {"list", "merge", "first", "consensus"},
    ("Stage", "gate"): {"human"},
    ("Adapter", "type"): {"script", "python"},
    ("Adapter", "parse"): {"json"},
    ("SafetyCondition", "op"): {
        "contains",
        "not_contains",
        "equals",
        "not_equals",
        "matches_regex",
        "truthy",
    },
    ("ToolSafetyRule", "action"): {"allow", "block", "warn", "log", "require_approval"},
    ("HarnessSpec", "safety_mode"): {"permissive", "strict"},
    ("HarnessSpec", "mission_source"): {"static", "work_unit"},
    ("SelfImprovementConfig", "editable_surfaces"): {
        "descriptions",
        "schemas",
        "model_tiers",
        "retry_counts",
        "timeouts",
    },
    ("CronTrigger", "type"): {"cron"},
    ("WebhookTrigger", "type"): {"webhook"},
}


def _yaml(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def _walk(
    model: str, data: Any, where: str, seen: set[tuple[str, str]], values: dict[Any, set[Any]]
) -> Iterator[str]:
    """Record every (model, field) ``data`` sets, and yield the keys 0.7.0 did not have."""
    if model == "Trigger":
        model = (
            "WebhookTrigger"
            if isinstance(data, dict) and data.get("type") == "webhook"
            else ("CronTrigger")
        )
    fields = OLD_MODELS[model]
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        field = key if key in fields else ("*" if "*" in fields else None)
        if field is None:
            yield f"{where}.{key} (not a field of 0.7.0's {model})"
            continue
        seen.add((model, field))
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (str, int, float, bool)):
                values.setdefault((model, field), set()).add(item)
        kind = fields[field]
        if kind is None or value is None:
            continue
        if kind.startswith("["):
            for i, item in enumerate(value):
                yield from _walk(kind[1:-1], item, f"{where}.{key}[{i}]", seen, values)
        elif kind.startswith("{"):
            for name, item in value.items():
                yield from _walk(kind[1:-1], item, f"{where}.{key}.{name}", seen, values)
        else:
            yield from _walk(kind, value, f"{where}.{key}", seen, values)


def _own_documents() -> list[tuple[str, str, Any]]:
    """(model, file, data) for every YAML file of own/: specs, child specs, agent bundles."""
    docs: list[tuple[str, str, Any]] = []
    for path in sorted((LEGACY / "own").rglob("*.y*ml")):
        model = "CompiledAgent" if path.name == "agent.yaml" else "HarnessSpec"
        docs.append((model, path.relative_to(LEGACY).as_posix(), _yaml(path)))
    return docs


def _coverage() -> tuple[set[tuple[str, str]], dict[Any, set[Any]], list[str]]:
    seen: set[tuple[str, str]] = set()
    values: dict[Any, set[Any]] = {}
    foreign: list[str] = []
    for model, name, data in _own_documents():
        foreign += _walk(model, data, name, seen, values)
    return seen, values, foreign


def test_own_corpus_uses_every_field_of_the_older_models() -> None:
    seen, _, _ = _coverage()
    every = {(model, field) for model, fields in OLD_MODELS.items() for field in fields}
    missing = sorted(f"{model}.{field}" for model, field in every - seen)
    assert not missing, f"no own/ spec uses these 0.7.0 fields: {missing}"


def test_own_corpus_uses_every_value_of_the_older_enumerations() -> None:
    _, values, _ = _coverage()
    missing = {
        f"{model}.{field}": sorted(wanted - values.get((model, field), set()))
        for (model, field), wanted in OLD_VALUES.items()
        if wanted - values.get((model, field), set())
    }
    assert not missing, f"no own/ spec uses these 0.7.0 values: {missing}"


def test_own_corpus_is_written_in_the_older_format_only() -> None:
    """Nothing in own/ is a field 0.7.0 did not have (the corpus tests the older format)."""
    _, _, foreign = _coverage()
    assert not foreign


# ----------------------------------------------------------------------------------------------
# The own/ corpus uses the forms the 0.7.0 user guide writes.


def _own_specs() -> list[dict[str, Any]]:
    return [data for model, _, data in _own_documents() if model == "HarnessSpec"]


def _stages() -> list[dict[str, Any]]:
    return [stage for spec in _own_specs() for stage in spec["stages"]]


def _wrapped(value: Any) -> bool:
    return isinstance(value, str) and bool(re.fullmatch(r"\s*\{\{.*\}\}\s*", value, re.S))


def _judge_scoring_with(name: str) -> bool:
    for stage in _stages():
        role, schema = stage.get("role") or {}, stage.get("output_schema") or {}
        props = schema.get("properties") or {}
        if role.get("type") == "judge" and name in props and "score" not in props:
            return True
    return False


def _bare_input_without_declared_inputs() -> bool:
    reserved = {"loop", "round", "not", "true", "false"}
    for spec in _own_specs():
        if (spec.get("contracts") or {}).get("inputs"):
            continue
        known = {s["id"] for s in spec["stages"]} | {s.get("partition_key") for s in spec["stages"]}
        for stage in spec["stages"]:
            text = (stage.get("role") or {}).get("description", "")
            for name in re.findall(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}", text):
                if name not in known and name not in reserved and not name.startswith("_"):
                    return True
    return False


FORMS: dict[str, Callable[[], bool]] = {
    "contracts.inputs as a list of {name, type, description}": lambda: any(
        isinstance(spec.get("contracts", {}).get("inputs"), list)
        and all(
            isinstance(i, dict) and {"name", "type", "description"} == set(i)
            for i in spec["contracts"]["inputs"]
        )
        for spec in _own_specs()
    ),
    "continuation.carry_forward as a list of `key: stage.field`": lambda: any(
        all(
            isinstance(i, dict) and set(i) == {"key"} and "." in i["key"]
            for i in spec["continuation"]["carry_forward"]
        )
        for spec in _own_specs()
        if spec.get("continuation")
    ),
    "partition_key a bare name": lambda: any(
        "." not in stage["partition_key"] for stage in _stages() if stage.get("partition_key")
    ),
    'skip_if as "{{ expr }}"': lambda: any(_wrapped(s.get("skip_if")) for s in _stages()),
    'condition as "{{ expr }}"': lambda: any(_wrapped(s.get("condition")) for s in _stages()),
    'loop.until as "{{ expr }}"': lambda: any(
        _wrapped((s.get("loop") or {}).get("until")) for s in _stages()
    ),
    'on_fail.loop.until as "{{ expr }}"': lambda: any(
        _wrapped(((s.get("on_fail") or {}).get("loop") or {}).get("until")) for s in _stages()
    ),
    "gate: human with present:": lambda: any(
        s.get("gate") == "human" and isinstance(s.get("present"), str) for s in _stages()
    ),
    "a downstream stage branching on the gate's approved": lambda: any(
        ".approved" in str(s.get("condition", "")) + str(s.get("skip_if", "")) for s in _stages()
    ),
    "a judge scoring with confidence": lambda: _judge_scoring_with("confidence"),
    "a judge scoring with quality_score": lambda: _judge_scoring_with("quality_score"),
    "bare run-input names in templates, no inputs declared": _bare_input_without_declared_inputs,
    "a stage reading a fail_as_value stage's _failed": lambda: any(
        "._failed" in str((s.get("role") or {}).get("description", "")) for s in _stages()
    ),
    "an isolated subagent fanned out over partition_source": lambda: any(
        s.get("isolated") and s.get("subagent_spec") and s.get("partition_source")
        for s in _stages()
    ),
    "every tier on provider: simulate with model: kept, in some specs": lambda: any(
        all(
            t.get("provider") == "simulate" and t.get("model")
            for t in spec.get("model_tiers", {}).values()
        )
        for spec in _own_specs()
        if spec.get("model_tiers")
    ),
    "no tier on simulate, in others": lambda: any(
        spec.get("model_tiers")
        and all(t.get("provider") != "simulate" for t in spec["model_tiers"].values())
        for spec in _own_specs()
    ),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_own_corpus_uses_the_user_guide_form(form: str) -> None:
    assert FORMS[form](), f"no own/ spec writes: {form}"
