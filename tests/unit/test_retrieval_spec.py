"""The spec side of retrieval (issue #30 items 7 and 10): ``knowledge:`` and a stage's
``retrieve:`` compile, are checked where they are written, and leave specs that do not use
them byte for byte as they were; the simulator's needed facts and citations behave as
declared; citations are checked against the passages shown."""

from __future__ import annotations

import hashlib

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.knowledge.citing import (
    CITE_INSTRUCTION,
    citation_problem,
    cited_refs,
    knowledge_block,
)
from armature_temporal.runtime.simulate._pitfalls import missing_facts, simulated_citation
from armature_temporal.spec.compiler import Plan, compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.spec.simulation import NeededFact

#: A spec using none of it, and its hashes computed before knowledge: existed (54ad8c2).
PINNED = """\
name: hash-pinned
model_tiers: {small: {provider: simulate}}
stages:
  - id: answer
    role:
      {type: worker, model_tier: small, description: "Answer {{ question }}", tools: [file_read]}
    simulate:
      pitfalls:
        - {id: vague, penalty: 0.2, symptom: "It stays vague.", lesson: "Be specific."}
"""
PINNED_SPEC_HASH = "559cda04f56c0bd3fb7529896ce83b51ae55889b637152dfdae57d3abd73fd67"
PINNED_PLAN_SHA = "6aefb81d8f6a8a542c0642e07699cf56011987c82021630ed2c7d63ea72189e9"


def plan_of(text: str) -> Plan:
    return compile_spec(load_spec_text(text, "test.yaml"))


def issues_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        plan_of(text)
    return [str(i) for i in caught.value.issues]


def test_a_spec_without_knowledge_keeps_its_plan_bytes_and_spec_hash() -> None:
    plan = plan_of(PINNED)
    assert plan.spec_hash == PINNED_SPEC_HASH
    assert hashlib.sha256(plan.to_json().encode()).hexdigest() == PINNED_PLAN_SHA
    assert "retrieve" not in plan.to_json() and "knowledge" not in plan.to_json()


def test_retrieve_compiles_with_its_collection_resolved() -> None:
    base = """\
name: kb
{knowledge}stages:
  - id: analyze
    role: {{description: "Topic of {{{{ question }}}}."}}
    output_mode: json
    output_schema: {{type: object, properties: {{topic: {{type: string}}}}, required: [topic]}}
  - id: answer
    role: {{description: "Answer {{{{ question }}}}."}}
    retrieve: {{query: "{{{{ analyze.topic }}}}", k: 3, sources: ["policies/*"], cite: true}}
"""
    named = plan_of(base.format(knowledge="knowledge: {collection: handbook}\n"))
    stage = named.stage("answer")
    assert stage.retrieve is not None and stage.retrieve.collection == "handbook"
    assert (stage.retrieve.k, stage.retrieve.sources, stage.retrieve.cite) == (
        3,
        ["policies/*"],
        True,
    )
    assert "analyze" in stage.depends_on  # the query's template implies the dependency
    assert named.knowledge_collection == "handbook"
    default = plan_of(base.format(knowledge=""))
    assert default.stage("answer").retrieve.collection == "kb"  # type: ignore[union-attr]
    assert default.knowledge_collection is None  # no knowledge: section, no retrieve tool


def test_misplaced_retrieval_is_refused_at_its_line() -> None:
    tool_stage = """\
name: kb
knowledge: {collection: k}
stages:
  - id: fetch
    tool: {name: file_read, args: {path: a.txt}}
    retrieve: {query: "x"}
"""
    (issue,) = issues_of(tool_stage)
    assert ":6:" in issue and "retrieve puts passages into a model's prompt; add a role" in issue
    no_knowledge = """\
name: kb
stages:
  - id: agent
    role:
      description: "Look it up."
      tools: [retrieve]
"""
    (issue,) = issues_of(no_knowledge)
    assert "stages[0].role.tools[0]" in issue and "add knowledge:" in issue
    as_tool_stage = """\
name: kb
knowledge: {collection: k}
stages:
  - id: fetch
    tool: {name: retrieve, args: {query: a}}
"""
    (issue,) = issues_of(as_tool_stage)
    assert "retrieve is a tool models call" in issue
    unknown_name = """\
name: kb
knowledge: {collection: k}
inputs: [question]
stages:
  - id: answer
    role: {description: "Answer."}
    retrieve: {query: "{{ nowhere.topic }}"}
"""
    issues = issues_of(unknown_name)
    assert any("retrieve.query" in i and "nowhere" in i for i in issues), issues


def test_a_fact_and_a_pitfall_may_not_share_an_id() -> None:
    text = """\
name: kb
stages:
  - id: answer
    role: {description: "Answer."}
    simulate:
      pitfalls: [{id: window, penalty: 0.1, symptom: s, lesson: l}]
      facts: [{id: window, fact: "Refunds within 30 days"}]
"""
    (issue,) = issues_of(text)
    assert "fact id 'window' appears twice" in issue


def test_a_needed_fact_costs_only_when_its_question_is_asked_and_the_prompt_lacks_it() -> None:
    fact = NeededFact(id="window", fact="Refunds are accepted within 30 days", when=["refund"])
    always = NeededFact(id="origin", fact="Orders ship from Rotterdam")
    asked = "Can I get a REFUND?"
    assert missing_facts(asked, [fact, always]) == [fact, always]
    carried = (
        f"{asked}\nrefunds are  accepted\nwithin 30 DAYS of delivery. Orders ship from Rotterdam"
    )
    assert missing_facts(carried, [fact, always]) == []  # case and whitespace normalised
    assert missing_facts("Where is my parcel?", [fact]) == []  # not needed for this question
    assert fact.shown_symptom == "Missing information: window"


def test_the_simulators_made_up_citations_come_at_the_declared_rate() -> None:
    prompt = knowledge_block(
        [{"ref": "knowledge:docs/a.md#2", "heading": "A", "text": "x"}], cite=True
    )
    for quality in (0.2, 0.8):
        made_up = sum(
            "#1001" in (simulated_citation(f"seed-{i}", prompt, quality) or "") for i in range(4000)
        )
        assert made_up / 4000 == pytest.approx((1 - quality) / 2, abs=0.025)
    assert simulated_citation("s", "no request to cite", 0.5) is None
    assert CITE_INSTRUCTION in prompt


def test_citations_must_name_shown_passages_and_only_those() -> None:
    shown = ["knowledge:docs/a.md#2", "knowledge:docs/b.md#0"]
    assert citation_problem("As [knowledge:docs/a.md#2] says, yes.", shown) is None
    missing = citation_problem("Yes, within 30 days.", shown)
    assert missing is not None and "cites no passage" in missing
    made_up = citation_problem("See [knowledge:docs/a.md#9] and [knowledge:docs/a.md#2].", shown)
    assert made_up is not None and "knowledge:docs/a.md#9" in made_up
    answer = "[knowledge:x.md#1] [knowledge:x.md#1] [knowledge:Refund Policy.md#0] knowledge:y.md#3"
    assert cited_refs(answer) == ["knowledge:x.md#1", "knowledge:Refund Policy.md#0"]
    spaced = ["knowledge:policies/Refund Policy.md#0", "knowledge:https://x.org/faq#top#2"]
    assert citation_problem("Yes [knowledge:https://x.org/faq#top#2].", spaced) is None
    assert knowledge_block([]) == "Knowledge: the search found no passage for this task."


def test_a_facts_own_symptom_and_a_stages_own_collection_are_used() -> None:
    from armature_temporal.runtime.simulate import simulate_completion

    fact = NeededFact(id="window", fact="Refunds within 30 days", symptom="It guesses the window")
    sim = simulate_completion(
        seed="s",
        prompt="How long do refunds take?",
        output_mode="text",
        output_schema=None,
        role_type="worker",
        valid_rate=1.0,
        quality=0.8,
        facts=[fact],
    )
    assert sim.facts_missing == ["window"] and "It guesses the window." in sim.text
    text = """\
name: kb
knowledge: {collection: handbook}
stages:
  - id: answer
    role: {description: "Answer."}
    retrieve: {query: "q", collection: archive}
"""
    plan = plan_of(text)
    assert plan.stage("answer").retrieve.collection == "archive"  # type: ignore[union-attr]
    assert plan.knowledge_collection == "handbook"  # the retrieve tool's
    trial = text.replace("collection: archive", "collection: kb~0123456789")
    with pytest.raises(SpecError, match="trial or staging collection"):
        plan_of(trial)
    with pytest.raises(SpecError, match=r"retrieve\.collection"):
        plan_of(text.replace("collection: archive", "collection: ../other"))
