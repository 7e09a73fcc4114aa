"""Loop 3, enrichment (issue #30 item 9), against the simulator's ground truth on a real
Temporal dev server and trace store: a spec whose answers need a fact from a document not yet
indexed says so in its answers ("Missing information: …"); one improvement round reads those
gaps, proposes the candidate documents that match them, verifies each by paired runs against
a trial collection (never the live one), and Holm decides: the document that carries the fact
is verified — and lifts the answers' latent quality by a paired interval above zero — while a
plausible document without it is not, and an irrelevant one is never proposed. The verified
addition goes to the review lane (a new document enters prompts), never into the spec itself."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from temporalio.client import Client

from armature_temporal.experience.embeddings import LexicalEmbedder
from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.improve.stats import bootstrap_means, interval
from armature_temporal.knowledge.spec_sources import index_spec_knowledge
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from tests.fakes import run_armature, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

SPEC = """\
name: {name}
model_tiers:
  small: {{provider: simulate, valid_rate: 1.0, quality: 0.75}}
  frontier: {{provider: simulate, valid_rate: 1.0, quality: 0.95}}
inputs:
  type: object
  properties: {{question: {{type: string}}}}
  required: [question]
knowledge:
  embedder: lexical
  sources: [docs/]
  candidates: [candidates/]
self_improvement:
  editable_surfaces: [knowledge.sources]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 8
stages:
  - id: answer
    role: {{model_tier: small, description: "Answer the customer: {{{{ question }}}}"}}
    retrieve: {{query: "{{{{ question }}}}", k: 2}}
    simulate:
      facts:
        - {{id: refund_window, fact: "Refunds are accepted within 30 days of delivery",
           when: [refund], penalty: 0.4}}
  - id: review
    depends_on: [answer]
    role: {{type: judge, model_tier: frontier, description: "Judge {{{{ answer }}}}."}}
"""

FILES = {
    "docs/shipping.md": "# Shipping\n\nOrders ship from Rotterdam within two business days.\n",
    "docs/accounts.md": "# Accounts\n\nPasswords are reset from the sign-in page.\n",
    # carries the fact the refund questions need
    "candidates/refund-policy.md": "# Refund policy\n\nRefunds are accepted within 30 days of "
    "delivery. A refund window question? The refund goes to the original payment method.\n",
    # plausible (all about refunds) but without the fact: it cannot help
    "candidates/refund-stories.md": "# Refund stories\n\nCustomers love our refund window "
    "stories: one refund came with a hand-written note, another refund with flowers.\n",
    # about nothing the answers lacked
    "candidates/company-history.md": "# Our history\n\nThe company was founded in a garage in "
    "1998 by two kettle enthusiasts.\n",
}

QUESTIONS = [
    "Can I get a refund for my kettle?",
    "What is the refund window?",
    "I want a refund, the lid is loose.",
    "Is a refund possible after two weeks?",
    "Refund for a gift?",
    "How long do refunds take to be allowed?",
    "Where do orders ship from?",
    "How do I reset my password?",
]


def _folder(tmp_path: Path, name: str) -> Path:
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name), encoding="utf-8")
    return path


def _quality(run_id: str) -> float:
    (attempt,) = [
        r
        for r in TraceStore().records(run_id)
        if r.kind == "attempt" and r.stage_id == "answer" and r.output_valid
    ]
    value = attempt.data["simulated_quality"]
    assert isinstance(value, float)
    return value


async def test_one_round_adds_the_document_that_carries_the_missing_fact_and_no_other(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = _folder(tmp_path, "shop-enrich")
    loaded = load_spec(path)
    plan = compile_spec(loaded)
    assert plan.knowledge_collection == "shop-enrich"
    index_spec_knowledge(TraceStore(), path, "shop-enrich", ["docs/"], embedder=LexicalEmbedder())
    async with build_worker(client, task_queue):
        for i, question in enumerate(QUESTIONS):
            handle = await start(
                client, plan, task_queue, {"question": question}, run_id=f"shop-hist-{i}"
            )
            done = await asyncio.wait_for(run_outcome(handle), timeout=60)
            assert done is not None and done.state == "completed", done
        shown = await run_armature("knowledge", "gaps", str(path), "--json")
        text = await run_armature("knowledge", "gaps", str(path))
        result: ImproveResult = await client.execute_workflow(
            "Improve",
            ImproveInput(spec_text=path.read_text(), spec_path=str(path)),
            id="improve-shop-enrich",
            task_queue=task_queue,
            result_type=ImproveResult,
        )
    # What the runs lacked, as a person sees it before any round.
    assert shown.returncode == 0, shown.stderr
    found = json.loads(shown.stdout)
    (gap,) = found["gaps"]
    assert gap["topic"] == "refund window" and gap["runs"] == 6 and gap["stages"] == ["answer"]
    assert [c["source"] for c in found["candidates"]] == [
        "candidates/refund-policy.md",
        "candidates/refund-stories.md",
    ]
    assert found["questions_for_a_person"] == []
    assert "1 knowledge gap in 8 runs" in text.stdout and "refund-policy.md" in text.stdout

    assert result.status == "proposed", (result.detail, result.notes)
    by_doc = {p.changes[0].new[-1]: p for p in result.proposals}
    # the two refund documents were proposed; the company history never was
    assert set(by_doc) == {"candidates/refund-policy.md", "candidates/refund-stories.md"}
    policy, stories = by_doc["candidates/refund-policy.md"], by_doc["candidates/refund-stories.md"]
    assert policy.changes[0].old == ["docs/"] and policy.changes[0].surface == "knowledge.sources"
    assert "lacked 'refund window'" in policy.changes[0].why
    assert policy.verdict == "verified", policy.detail
    assert stories.verdict == "not_better", stories.detail
    assert policy.test is not None and policy.test.m == 2  # one Holm family of both
    assert policy.predicted_fixes == ["low_judge:answer"]
    assert policy.lane == "review"  # a new document enters prompts: a person decides

    # Ground truth: the latent quality of the answers, pair by pair (shared noise).
    k = result.proposals.index(policy) + 1
    j = result.proposals.index(stories) + 1
    base = [_quality(f"improve-shop-enrich/baseline/{i}") for i in range(8)]
    added = [_quality(f"improve-shop-enrich/candidate-{k}/{i}") for i in range(8)]
    decoy = [_quality(f"improve-shop-enrich/candidate-{j}/{i}") for i in range(8)]
    diffs = [a - b for a, b in zip(added, base, strict=True)]
    low, high = interval(bootstrap_means(diffs, seed=7), 0.05)
    assert low > 0, (diffs, low, high)
    assert all(abs(d - b) < 1e-9 for d, b in zip(decoy, base, strict=True))  # no fact: no gain

    # The review lane wrote the verified addition beside the spec, never into it.
    assert result.settled is not None and result.settled.pending == policy.id
    assert "candidates/refund-policy.md" in Path(str(result.settled.pending_path)).read_text()
    assert path.read_text() == SPEC.format(name="shop-enrich")
    # Verification searched trial collections; the live one still holds only docs/.
    live = {s.source for s in TraceStore().knowledge_sources("shop-enrich")}
    assert live == {"docs/shipping.md", "docs/accounts.md"}
    # and the trial collections are gone once the round recorded its proposals (SQLite's
    # full-text ranking counts every collection's rows: they must not linger)
    left = {s.collection for s in TraceStore().knowledge_sources()}
    assert not {c for c in left if c.startswith("shop-enrich~")}, left
