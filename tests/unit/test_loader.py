"""Loader: every problem reported with its line, path, value and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.spec.loader import load_spec, load_spec_text

MINIMAL = """\
name: demo
stages:
  - id: a
    role: {name: A, description: hello}
"""


def issues_of(text: str, base_dir: Path | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "spec.yaml", base_dir=base_dir)
    return [str(i) for i in info.value.issues]


def test_minimal_spec_loads() -> None:
    loaded = load_spec_text(MINIMAL)
    assert loaded.spec.name == "demo"
    assert loaded.spec.stages[0].role is not None
    assert loaded.spec.stages[0].role.type == "worker"


def test_misspelt_key_reports_its_line_and_the_right_spelling() -> None:
    text = "\n".join(
        [
            "name: demo",  # 1
            "description: a spec",  # 2
            "stages:",  # 3
            "  - id: first",  # 4
            "    role:",  # 5
            "      name: A",  # 6
            "      description: hello",  # 7
            "  - id: second",  # 8
            "    depends_on: [first]",  # 9
            "    role:",  # 10
            "      name: B",  # 11
            "      descripton: world",  # 12
        ]
    )
    issues = issues_of(text)
    wrong = [i for i in issues if "descripton" in i]
    assert len(wrong) == 1
    assert wrong[0].startswith("spec.yaml:12:7: stages[1].role.descripton: unknown field")
    assert "did you mean 'description'?" in wrong[0]


def test_cycle_is_reported_as_its_path() -> None:
    text = """\
name: cyc
stages:
  - id: a
    depends_on: [c]
    role: {name: A, description: x}
  - id: b
    depends_on: [a]
    role: {name: B, description: x}
  - id: c
    depends_on: [b]
    role: {name: C, description: x}
"""
    issues = issues_of(text)
    assert len(issues) == 1
    assert "dependency cycle: a -> b -> c -> a" in issues[0]
    assert issues[0].startswith("spec.yaml:4:")


def test_missing_subagent_file_names_the_file(tmp_path: Path) -> None:
    text = """\
name: parent
stages:
  - id: fan
    subagent_spec: children/missing.yaml
    fan_out: 2
"""
    issues = issues_of(text, base_dir=tmp_path)
    assert len(issues) == 1
    assert "missing.yaml" in issues[0] and "does not exist" in issues[0]
    assert issues[0].startswith("spec.yaml:4:5: stages[0].subagent_spec")


def test_subagent_cycle_across_files_is_reported(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\nstages:\n  - id: s\n    subagent_spec: b.yaml\n")
    (tmp_path / "b.yaml").write_text("name: b\nstages:\n  - id: s\n    subagent_spec: a.yaml\n")
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "a.yaml")
    text = str(info.value)
    assert "subagent cycle across files: a.yaml -> b.yaml -> a.yaml" in text


def test_invalid_subagent_reports_the_child_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text("name: child\nstages:\n  - id: s\n    rol: {}\n")
    (tmp_path / "p.yaml").write_text("name: p\nstages:\n  - id: f\n    subagent_spec: child.yaml\n")
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "p.yaml")
    issues = [str(i) for i in info.value.issues]
    assert any("child.yaml:4:5: stages[0].rol: unknown field 'rol'" in i for i in issues)
    assert any("p.yaml:4:5: stages[0].subagent_spec" in i and "invalid" in i for i in issues)


def test_all_errors_are_reported_not_just_the_first() -> None:
    text = """\
name: many
stages:
  - id: a
    role: {name: A, description: x, model_tier: fronteir}
  - id: b
    depends_on: [aa]
    role: {name: B, description: x}
"""
    issues = issues_of(text)
    assert len(issues) == 2
    assert "unknown tier 'fronteir'" in issues[0] and "did you mean 'frontier'?" in issues[0]
    assert "unknown stage 'aa'" in issues[1] and "did you mean 'a'?" in issues[1]


def test_duplicate_stage_id_is_rejected() -> None:
    text = MINIMAL + "  - id: a\n    role: {name: B, description: y}\n"
    (issue,) = issues_of(text)
    assert "duplicate stage id 'a'" in issue and issue.startswith("spec.yaml:5:")


def test_yaml_syntax_error_has_line() -> None:
    (issue,) = issues_of("name: x\nstages: [\n  - id: a\n")
    assert issue.startswith("spec.yaml:") and "YAML syntax" in issue
    assert issue.split(":")[1] != "0"


def test_duplicate_yaml_key_is_rejected() -> None:
    (issue,) = issues_of("name: x\nname: y\nstages: []\n")
    assert "duplicate key" in issue and issue.startswith("spec.yaml:2:")


def test_template_syntax_error_names_line_within_template() -> None:
    text = """\
name: t
stages:
  - id: a
    role:
      name: A
      description: |
        line one
        {{ inputs.x
"""
    (issue,) = issues_of(text)
    assert "stages[0].role.description" in issue
    assert "template syntax error on line 2 of the template" in issue


def test_template_reading_a_stage_makes_it_upstream() -> None:
    text = """\
name: t
stages:
  - id: a
    role: {name: A, description: "{{ b.content }}"}
  - id: b
    role: {name: B, description: x}
"""
    loaded = load_spec_text(text)
    assert loaded.implicit == {"a": ["b"]}
    assert loaded.spec.stages[0].depends_on == ["b"]


def test_implicit_dependency_that_closes_a_cycle_is_reported() -> None:
    text = """\
name: t
stages:
  - id: a
    role: {name: A, description: "{{ b.content }}"}
  - id: b
    depends_on: [a]
    role: {name: B, description: x}
"""
    (issue,) = issues_of(text)
    assert "dependency cycle" in issue


def test_template_reading_a_post_run_stage_is_rejected() -> None:
    text = """\
name: t
stages:
  - id: a
    role: {name: A, description: "{{ r.content }}"}
  - id: r
    post_run: true
    role: {name: R, description: x}
"""
    (issue,) = issues_of(text)
    assert "reads post_run stage 'r'" in issue


def test_template_unknown_name_gets_suggestion() -> None:
    text = """\
name: t
inputs: [ticket]
stages:
  - id: a
    role: {name: A, description: "{{ tiket }}"}
"""
    (issue,) = issues_of(text)
    assert "unknown name 'tiket'" in issue and "did you mean 'ticket'?" in issue


def test_template_unknown_output_field_of_upstream_stage() -> None:
    text = """\
name: t
stages:
  - id: a
    role: {name: A, description: x}
    output_mode: json
    output_schema: {type: object, properties: {urgency: {type: string}}}
  - id: b
    depends_on: [a]
    role: {name: B, description: "{{ a.urgencey }}"}
"""
    (issue,) = issues_of(text)
    assert "stage 'a' has no output field 'urgencey'" in issue
    assert "did you mean 'urgency'?" in issue


def test_bad_until_expression_is_reported() -> None:
    text = """\
name: t
stages:
  - id: a
    role: {name: A, description: x}
    loop: {max_iterations: 3, until: "output.content ==="}
"""
    (issue,) = issues_of(text)
    assert "stages[0].loop.until: expression syntax error" in issue


def test_bad_regex_in_safety_rule_is_reported() -> None:
    text = (
        MINIMAL
        + """\
safety_rules:
  - tool: shell
    condition: {field: argv, op: matches_regex, value: "(unclosed"}
    action: block
"""
    )
    (issue,) = issues_of(text)
    assert "safety_rules[0].condition.value" in issue and "does not compile" in issue


def test_invalid_output_schema_is_reported() -> None:
    text = """\
name: t
stages:
  - id: a
    role: {name: A, description: x}
    output_mode: json
    output_schema: {type: objekt}
"""
    (issue,) = issues_of(text)
    assert "stages[0].output_schema: not a valid JSON Schema" in issue


def test_fan_in_without_fan_out_is_rejected() -> None:
    text = MINIMAL.replace(
        "    role: {name: A, description: hello}\n",
        "    role: {name: A, description: hello}\n    fan_in: list\n",
    )
    (issue,) = issues_of(text)
    assert "fan_in goes with subagent_spec and fan_out" in issue


def test_post_run_stage_cannot_have_dependents() -> None:
    text = """\
name: t
stages:
  - id: refine
    post_run: true
    role: {name: R, description: "{{ _transcript }}"}
  - id: b
    depends_on: [refine]
    role: {name: B, description: x}
"""
    (issue,) = issues_of(text)
    assert "'refine' is a post_run stage" in issue


def test_unknown_literal_value_suggests() -> None:
    text = MINIMAL.replace(
        "{name: A, description: hello}", "{name: A, description: hello, type: wroker}"
    )
    (issue,) = issues_of(text)
    assert "'wroker' is not one of" in issue and "did you mean 'worker'?" in issue


def test_unknown_tool_is_a_warning_that_suggests() -> None:
    text = MINIMAL.replace(
        "{name: A, description: hello}", "{name: A, description: hello, tools: [file_raed]}"
    )
    (warning,) = [str(w) for w in load_spec_text(text).warnings]
    assert "unknown tool 'file_raed'" in warning and "did you mean 'file_read'?" in warning
    assert "tools: [{module: ...}]" in warning


def test_gate_shorthand_and_duration() -> None:
    text = MINIMAL + "  - id: ok\n    depends_on: [a]\n    gate: {type: human, timeout: 1h30m}\n"
    spec = load_spec_text(text).spec
    assert spec.stages[1].gate is not None and spec.stages[1].gate.timeout == 5400.0
    short = load_spec_text(MINIMAL + "  - id: ok\n    gate: human\n").spec
    assert short.stages[1].gate is not None and short.stages[1].gate.type == "human"


def test_bad_duration_says_the_accepted_forms() -> None:
    (issue,) = issues_of(MINIMAL + "  - id: ok\n    gate: {timeout: soon}\n")
    assert "'soon' is not a duration" in issue and "'2d'" in issue


def test_a_judge_without_a_score_is_a_warning_and_cannot_block() -> None:
    text = """\
name: t
stages:
  - id: j
    role: {name: J, type: judge, description: x}
    output_mode: json
    output_schema: {type: object, properties: {grade: {type: number}}}
"""
    (warning,) = [str(w) for w in load_spec_text(text).warnings]
    assert "no score, quality_score or confidence" in warning
    (issue,) = issues_of(text + "    block_below: 0.5\n")
    assert "block_below needs a score" in issue


def test_simulate_only_knobs_rejected_on_real_provider() -> None:
    text = MINIMAL + "model_tiers:\n  small: {provider: openai, model: gpt-4o-mini, quality: 0.5}\n"
    (issue,) = issues_of(text)
    assert "model_tiers.small" in issue and "only apply to provider 'simulate'" in issue


def test_cron_trigger_validated() -> None:
    (issue,) = issues_of(MINIMAL + "triggers:\n  - {type: cron, schedule: '0 9 * *'}\n")
    assert "triggers[0].schedule" in issue and "needs 5" in issue


def test_non_mapping_document_is_a_spec_error() -> None:
    (issue,) = issues_of("- just\n- a list\n")
    assert "a spec is a YAML mapping" in issue


def test_self_referencing_alias_is_a_spec_error() -> None:
    issues = issues_of("name: x\nstages: &s\n  - *s\n")
    assert issues and all(i.startswith("spec.yaml:") for i in issues)


def test_contracts_inputs_alternative_is_accepted() -> None:
    text = MINIMAL.replace("hello", "'{{ inputs.q }}'") + "contracts:\n  inputs: [q]\n"
    spec = load_spec_text(text).spec
    assert spec.inputs_schema["required"] == ["q"]


@pytest.mark.parametrize(
    ("tier", "words"),
    [
        (
            "{provider: openai, model: gpt-4o-mini, adapter: latest}",
            "applies to provider: local only",
        ),
        ("{provider: local}", "provider 'local' needs model: the directory of a transformers"),
        (
            "{provider: local, model: /m, adapter: 'latest:aa'}",
            "'latest:aa' names no stage of this spec; stages: ['a'] (did you mean 'a'?)",
        ),
    ],
    ids=["adapter-on-litellm", "local-without-model", "latest-of-no-stage"],
)
def test_local_tier_fields_are_checked(tier: str, words: str) -> None:
    text = (
        f"name: x\nmodel_tiers:\n  small: {tier}\n"
        "stages:\n  - {id: a, role: {name: A, description: x}}\n"
    )
    (issue,) = issues_of(text)
    assert words in issue and "model_tiers.small" in issue


def test_local_model_and_adapter_paths_resolve_against_the_spec_directory(tmp_path: Path) -> None:
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec

    spec = tmp_path / "specs" / "s.yaml"
    spec.parent.mkdir()
    spec.write_text(
        "name: x\nmodel_tiers:\n"
        "  pinned: {provider: local, model: ../models/base, adapter: adapters/v1}\n"
        "  newest: {provider: local, model: /abs/base, adapter: latest}\n"
        "  other: {provider: local, model: base, adapter: 'latest:a'}\n"
        "stages:\n  - {id: a, role: {name: A, model_tier: pinned, description: x}}\n"
    )
    tiers = compile_spec(load_spec(spec)).tiers
    assert tiers["pinned"].model == str((tmp_path / "models" / "base").resolve())
    assert tiers["pinned"].adapter == str((tmp_path / "specs" / "adapters" / "v1").resolve())
    assert tiers["newest"].model == "/abs/base" and tiers["newest"].adapter == "latest"
    assert tiers["other"].adapter == "latest:a"


MANY_PROBLEMS = """\
name: many-problems
inputs: [q]
model_tiers:
  small: {provider: simulate}
stages:
  - id: a
    role: {name: A, descripton: "x", model_tier: fronteir}
  - id: a
    role: {name: B, description: "{{ nope.field }} {{ inputs.zzz }}", model_tier: huge}
    on_fail: {loop: {max: -1}}
  - id: c
    depends_on: [zz]
    role: {name: C, description: "{{ missing_name }}", temperature: 9}
  - id: d
    gate: {type: robot}
  - id: e
    tool: {name: shell, args: {argv: [ls]}}
    output_mode: yaml
"""


def test_validate_reports_every_problem_in_one_pass() -> None:
    """Schema errors hid the rest: 8 problems, then 4 more once those were fixed (an unknown
    tier, unknown template names, a duplicate id). Now a stage with a schema error keeps the
    rest of it checked."""
    with pytest.raises(SpecError) as caught:
        load_spec_text(MANY_PROBLEMS, "many.yaml")
    found = {(i.line, i.message.split(";")[0]) for i in caught.value.issues}
    expected = {
        (7, "missing required field 'description'"),
        (7, "unknown field 'descripton'"),
        (7, "unknown tier 'fronteir'"),
        (8, "duplicate stage id 'a' (first used by stages[0])"),
        (9, "template uses unknown name 'nope'"),
        (9, "template reads inputs.zzz, but the spec declares no input 'zzz'"),
        (9, "unknown tier 'huge'"),
        (10, "Input should be greater than or equal to 0"),
        (12, "unknown stage 'zz'"),
        (13, "template uses unknown name 'missing_name'"),
        (13, "Input should be less than or equal to 2"),
        (15, "'robot' is not one of 'human'"),
        (18, "'yaml' is not one of 'text', 'json' or 'guided_json'"),
    }
    assert found == expected, sorted(found ^ expected)


def test_a_placeholder_for_a_missing_field_is_never_reported() -> None:
    """The repair fills a missing description with a placeholder; nothing about the
    placeholder is reported, only that the field is missing."""
    text = "name: x\nstages:\n  - id: a\n    role: {name: A}\n"
    with pytest.raises(SpecError) as caught:
        load_spec_text(text, "x.yaml")
    (issue,) = caught.value.issues
    assert issue.message == "missing required field 'description'"
