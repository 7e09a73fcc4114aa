"""The armature-agents 0.7.0 spec format loads here and compiles to what it means."""

from __future__ import annotations

from pathlib import Path

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text


def issues_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec_text(text)
    return [str(i) for i in info.value.issues]


OLDER = """\
name: older
contracts:
  inputs:
    - {name: topic, type: string, description: What to research, required: true}
    - {name: depth, type: int, default: 2}
  max_llm_calls: 40
  timeout_hours: 0.5
  output_max_chars: 4000
  outputs:
    - {stage: report, key: content, required: true}
continuation:
  carry_forward:
    - key: report.content
model_tiers:
  small: {provider: simulate, model: qwen/qwen3.6-27b, tool_calling: true}
  frontier: {provider: simulate, model: anthropic/claude-opus-4-7}
skill_library:
  plain: {id: plain, description: Plain language, content: Use short sentences.}
stages:
  - id: research
    role:
      type: researcher
      model_tier: small
      skills: [plain]
      description: "Research {{ topic }} to depth {{ depth }}."
    output_mode: guided_json
    output_schema:
      type: object
      required: [findings]
      properties: {findings: {type: array, items: {type: string}}}
    on_fail:
      loop: {stage: research, context: retry, max: 2, until: "{{ findings }}"}
    signature:
      input: {topic: the topic, depth: how deep}
      output: {findings: what was found}
  - id: review
    gate: human
    present: "Findings: {{ research.findings }}"
  - id: report
    skip_if: "{{ not review.approved }}"
    role: {type: worker, description: "Write the report from {{ research.findings }}."}
  - id: judge
    depends_on: [report]
    role: {type: judge, description: "Score {{ report.content }}"}
    output_mode: json
    output_schema:
      type: object
      properties: {confidence: {type: number}, notes: {type: string}}
    block_below: 0.5
checkpoint: true
"""


def test_an_older_spec_loads_and_compiles_to_its_meaning() -> None:
    loaded = load_spec_text(OLDER)
    plan = compile_spec(loaded)
    schema = plan.inputs_schema
    assert schema["required"] == ["topic"]
    assert schema["properties"]["depth"] == {"type": "integer", "default": 2}
    assert plan.max_llm_calls == 40 and plan.run_timeout_s == 1800
    assert plan.continuation is not None
    assert plan.continuation.carry_forward == {"content": "report.content"}
    research = plan.stage("research")
    assert research.role is not None and research.role.name == "Research"
    assert research.max_attempts == 3  # max: 2 retries after the first attempt
    assert research.retry_until == "findings"
    assert research.escalate and research.escalation_ladder == ["frontier"]  # guided_json default
    assert "Use short sentences." in research.role.guidance
    assert "- findings: what was found" in research.role.guidance
    assert research.context_keys == ["topic", "depth"]
    review = plan.stage("review")
    assert review.gate is not None and review.gate.message == "Findings: {{ research.findings }}"
    assert review.gate.on_reject == "continue"  # report's skip_if reads it
    # Templates made research upstream of review and report, and review upstream of report.
    assert review.implicit_depends_on == ["research"]
    assert set(plan.stage("report").implicit_depends_on) == {"research", "review"}
    assert plan.stage("report").skip_if == "not review.approved"
    assert plan.stage("report").output_max_chars == 4000
    assert plan.stage("judge").block_below == 0.5
    assert plan.checkpoint is True
    assert [o.key for o in plan.required_outputs] == ["content"]


def test_bare_run_inputs_are_warnings_only_where_no_inputs_are_declared() -> None:
    text = "name: t\nstages:\n  - id: a\n    role: {description: 'About {{ topic }}'}\n"
    (warning,) = [str(w) for w in load_spec_text(text).warnings]
    assert "'topic' is read as a run input" in warning and "inputs: ['topic']" in warning
    declared = text.replace("stages:", "inputs: [topik]\nstages:")
    (issue,) = issues_of(declared)
    assert "unknown name 'topic'" in issue and "did you mean 'topik'?" in issue


def test_five_independent_mistakes_are_all_reported_in_one_pass() -> None:
    text = """\
name: broken
stages:
  - id: a
    role: {description: x, temperature: 9}
  - id: b
    depends_on: [nope]
    role: {description: x}
  - id: c
    role: {description: "{{ oops( }}"}
  - id: d
    output_mode: guided_jsn
    role: {description: x}
  - id: e
    role: {description: x, model_tier: hueg}
"""
    issues = issues_of(text)
    joined = "\n".join(issues)
    assert len(issues) == 5, joined
    assert "stages[0].role.temperature" in joined  # schema error
    assert "unknown stage 'nope'" in joined  # whole-document check, still run
    assert "template syntax error" in joined
    assert "stages[3].output_mode" in joined
    assert "unknown tier 'hueg'" in joined


def test_a_shell_rule_on_a_field_the_tool_lacks_is_refused_with_its_fields() -> None:
    text = """\
name: t
safety_rules:
  - tool: shell
    condition: {field: command, op: matches_regex, value: "rm"}
    action: block
stages:
  - id: a
    tool: {name: shell, args: {argv: [ls]}}
"""
    (issue,) = issues_of(text)
    assert "tool 'shell' has no argument 'command'" in issue
    assert "argv" in issue and "cmd" in issue


def test_accepted_but_unused_older_fields_warn_with_the_replacement() -> None:
    text = """\
name: t
trace: {enabled: true}
sandbox: {mode: docker}
stages:
  - id: a
    response_stage: true
    role: {description: x}
"""
    warnings = [str(w) for w in load_spec_text(text).warnings]
    assert any("trace" in w and "armature traces" in w for w in warnings)
    assert any("sandbox" in w and "restricted subprocess" in w for w in warnings)
    assert any("response_stage" in w for w in warnings)


def test_quoted_expressions_equal_bare_ones() -> None:
    bare = "name: t\nstages:\n  - id: a\n    skip_if: 1 > 2\n    role: {description: x}\n"
    quoted = bare.replace("skip_if: 1 > 2", "skip_if: '{{ 1 > 2 }}'")
    assert load_spec_text(bare).spec.stages[0].skip_if == "1 > 2"
    assert load_spec_text(quoted).spec.stages[0].skip_if == "1 > 2"


def test_context_shows_direct_dependencies_and_budgets_the_rest() -> None:
    from armature_temporal.runtime.prompts import (
        CONTEXT_BUDGET_CHARS,
        OMITTED,
        build_messages,
        stage_context,
    )

    big = "x" * (CONTEXT_BUDGET_CHARS - 10)
    variables = {"topic": "tides", "near": {"a": 1}, "mid": big, "far": "y" * 50, "gone": None}
    context = stage_context(
        variables, ["topic"], ["near", "mid", "far", "gone"], "About {{ topic }}", ["near"]
    )
    assert "topic" not in context  # the template quotes it
    assert context["near"] == {"a": 1} and context["mid"] == big
    assert context[OMITTED] == ["far"]  # no room left for it
    messages = build_messages(
        role_type="worker",
        role_name="W",
        prompt_template="About {{ topic }}",
        variables=variables,
        mission="",
        output_mode="text",
        output_schema=None,
        context=context,
    )
    user = messages[-1]["content"]
    assert user.startswith('About tides\n\nContext:\n- near: {"a": 1}')
    assert "not shown: far" in user


def test_adapter_commands_split_around_templates_and_rules_may_name_adapters() -> None:
    text = """\
name: t
adapters:
  fetch:
    name: fetch
    type: script
    cmd: "python3 fetch.py --source {{ source_url | default('x y') }} --n 3"
  piped: {name: piped, type: script, cmd: "ls | wc -l"}
safety_rules:
  - tool: fetch
    condition: {field: cmd, op: matches_regex, value: "rm"}
    action: block
  - tool: fetch
    condition: {field: path, op: truthy}
    action: block
stages:
  - {id: a, adapter: fetch}
  - {id: b, adapter: piped}
"""
    issues = issues_of(text)
    assert len(issues) == 2, issues
    assert any("tool 'fetch' has no argument 'path'" in i and "argv" in i for i in issues)
    assert any("adapters.piped.cmd" in i and "shell: true" in i for i in issues)
    fixed = text.replace('cmd: "ls | wc -l"', 'cmd: "ls | wc -l", shell: true').replace(
        "condition: {field: path, op: truthy}", "condition: {field: argv, op: truthy}"
    )
    plan = compile_spec(load_spec_text(fixed))
    adapter = plan.stage("a").adapter
    assert adapter is not None
    assert adapter.argv == [
        "python3",
        "fetch.py",
        "--source",
        "{{ source_url | default('x y') }}",
        "--n",
        "3",
    ]
    shell = plan.stage("b").adapter
    assert shell is not None and shell.shell and shell.argv == ["ls | wc -l"]


def test_missing_names_and_inputs_raise_but_missing_output_fields_are_empty() -> None:
    from jinja2 import UndefinedError

    from armature_temporal.spec.templating import evaluate, render, truth

    variables = {"classify": {"content": "prose"}, "inputs": {"topic": "t"}, "topic": "t"}
    assert render("[{{ classify.intent }}]", variables) == "[]"  # 0.7.0: empty
    assert evaluate("classify.intent == 'escalate'", variables) is False
    with pytest.raises(UndefinedError, match="run input 'topik' was not given"):
        render("{{ inputs.topik }}", variables)
    with pytest.raises(UndefinedError):
        render("{{ clasify.intent }}", variables)  # a misspelt name
    with pytest.raises(UndefinedError):
        evaluate("nope == 1", variables)
    assert [truth(v) for v in ("true", " Yes ", "1", "false", "no", "", "maybe")] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    assert truth(1) and truth([0]) and not truth(0) and not truth(None)


def test_layers_skills_and_agent_bundles_are_read_at_load_and_reach_the_prompt(
    tmp_path: Path,
) -> None:
    (tmp_path / "tone.md").write_text("Be brief.\n")
    (tmp_path / "cite.md").write_text("Cite every source.\n")
    (tmp_path / "agent.yaml").write_text(
        "role: {name: Echo, type: worker, description: 'Repeat {{ topic }}'}\n"
        "safety_rules: [{tool: shell, action: block, message: agents never shell}]\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        """\
name: layered
inputs: [topic, secret_note]
context_layers:
  - {name: tone, src: tone.md, precedence: 1}
  - {name: house, content: We are ACME., precedence: 5}
context_policy: {must: [tone, house], never: [secret_note]}
skill_library:
  cite: {description: Citations, path: cite.md}
agent_library:
  echo: {path: agent.yaml}
stages:
  - id: a
    role: {description: "About {{ topic }}", skills: [cite]}
  - id: b
    agent: echo
"""
    )
    from armature_temporal.spec.loader import load_spec

    plan = compile_spec(load_spec(spec))
    a = plan.stage("a")
    assert a.role is not None
    guidance = a.role.guidance
    assert guidance.index("We are ACME.") < guidance.index("Be brief.")  # precedence
    assert "Skill — Citations:\nCite every source." in guidance
    assert a.context_never == ["secret_note"]
    b = plan.stage("b")
    assert b.role is not None and b.role.name == "Echo" and b.role.prompt == "Repeat {{ topic }}"
    assert plan.safety_rules[0].message == "agents never shell"  # the bundle's rules come first
    (tmp_path / "cite.md").write_text("Cite twice.\n")
    assert compile_spec(load_spec(spec)).spec_hash != plan.spec_hash  # file text is in the hash


def test_a_template_may_not_read_what_context_policy_never_hides() -> None:
    text = """\
name: t
inputs: [topic, secret_note]
context_policy: {never: [secret_note]}
stages:
  - id: a
    role: {description: "{{ topic }} {{ secret_note }}"}
"""
    (issue,) = issues_of(text)
    assert "reads 'secret_note', but context_policy.never hides it" in issue


def test_an_agent_bundles_skill_file_is_read_beside_the_bundle(tmp_path: Path) -> None:
    """A bundle's skill with a `path` was never read: its text silently went missing. As in
    0.7.0 it is relative to the bundle, and confined like every file a spec names."""
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "style.md").write_text("Answer in haiku.\n")
    (agents / "agent.yaml").write_text(
        "role: {name: Poet, description: 'Write about {{ topic }}', skills: [style]}\n"
        "skill_library:\n  style: {description: Style, path: style.md}\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: bundled\ninputs: [topic]\nagent_library:\n  poet: {path: agents/agent.yaml}\n"
        "stages:\n  - {id: a, agent: poet}\n"
    )
    from armature_temporal.spec.loader import load_spec

    plan = compile_spec(load_spec(spec))
    role = plan.stage("a").role
    assert role is not None and "Skill — Style:\nAnswer in haiku." in role.guidance
    (agents / "agent.yaml").write_text(
        "role: {name: Poet, description: 'x', skills: [style]}\n"
        "skill_library:\n  style: {description: Style, path: ../../outside.md}\n"
    )
    (tmp_path.parent / "outside.md").write_text("secret\n")
    with pytest.raises(SpecError, match="outside"):
        load_spec(spec)
