"""The improvement loop on a real Temporal dev server: traces from real runs, a diagnosis, a
candidate change verified by paired runs of both versions, a proposal kept in the store, and
`armature proposals apply` writing it back to the spec file."""

from __future__ import annotations

import json
from pathlib import Path

from temporalio.client import Client

from armature_temporal.improve.models import ImproveInput, ImproveResult
from armature_temporal.improve.propose import JSON_INSTRUCTION
from armature_temporal.runtime.models import RunInput, RunResult
from armature_temporal.service.client import run_outcome
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import SPECS, plan_from, run_armature, run_history, start
from worker import build_worker

# The verification is statistical: a pair's difference is 0 when the small tier happens to be
# valid at its first try, and with 5 or more such pairs of 8 the 95% interval reaches 0. At
# valid_rate 0.4 that happens ~5% of the time (the test failed about that often); at 0.1,
# P(Binomial(8, 0.1) >= 5) < 0.1%.
SPEC = """\
# A drafting stage on a tier that is often invalid, escalating to a better one.
name: drafty
model_tiers:
  small: {provider: simulate, valid_rate: 0.1, quality: 0.5}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs:
  type: object
  properties: {topic: {type: string, default: tides}}
self_improvement:
  editable_surfaces: [draft.model_tier, draft.description]
  min_traces: 8
  target_hqs: 0.99
  verify_runs: 8
stages:
  - id: draft
    role:
      name: Drafter
      model_tier: small
      description: |
        Write a headline about {{ inputs.topic }}.
    output_mode: json
    output_schema:
      type: object
      properties: {headline: {type: string}}
      required: [headline]
    on_fail:
      loop: {max: 2}
      escalate: true
"""


async def _improve(
    client: Client, task_queue: str, text: str, path: Path, wid: str
) -> ImproveResult:
    return await client.execute_workflow(
        "Improve",
        ImproveInput(spec_text=text, spec_path=str(path)),
        id=wid,
        task_queue=task_queue,
        result_type=ImproveResult,
    )


async def test_a_round_waits_for_traces_then_verifies_a_tier_change_that_helps(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "drafty.yaml"
    path.write_text(SPEC)
    async with build_worker(client, task_queue):
        await run_history(client, task_queue, SPEC, "drafty", 3)
        early = await _improve(client, task_queue, SPEC, path, "improve-drafty-early")
        assert early.status == "too_few_traces"
        assert "3 finished runs" in early.detail and "min_traces = 8" in early.detail
        await run_history(client, task_queue, SPEC, "drafty", 10)
        # This round through the CLI, as a user runs it.
        addr = str(client.service_client.config.target_host)
        done = await run_armature(
            "improve", str(path), "--json", "--address", addr, "--task-queue", task_queue
        )
        assert done.returncode == 0, done.stderr
        as_json = json.loads(done.stdout)
        round_id = as_json.pop("improve_id")
        assert round_id.startswith("improve-drafty-")
        assert done.stderr.startswith(f"started {round_id} — ")  # progress goes to stderr
        result = ImproveResult.model_validate(as_json)

    diag = result.diagnosis
    assert diag is not None and diag.runs == 10  # the early round's runs are older ids
    (draft,) = diag.stages
    assert draft.invalid_rate > 0.2 and draft.escalation_rate > 0.2
    assert result.status == "proposed", result.detail
    by_field = {p.changes[0].field: p for p in result.proposals}
    tier = by_field["model_tier"]
    assert tier.changes[0].old == "small" and tier.changes[0].new == "frontier"
    assert tier.verdict == "verified", tier.detail
    assert tier.ci_low > 0 and len(tier.baseline_hqs) == len(tier.candidate_hqs) == 8
    removed = [ln for ln in tier.diff.splitlines() if ln.startswith("-") and "model_tier" in ln]
    added = [ln for ln in tier.diff.splitlines() if ln.startswith("+") and "model_tier" in ln]
    assert [ln.split(":", 1)[1].strip() for ln in removed + added] == ["small", "frontier"]
    # The description change is real text (scanned before it is proposed); the simulator
    # ignores prompts, so only chance could verify it — but it was run and scored.
    described = by_field["description"]
    assert described.changes[0].new.endswith(JSON_INSTRUCTION + "\n")
    assert described.verdict != "failed" and len(described.candidate_hqs) == 8

    # Verification runs are children of the round, recorded but left out of the diagnosis.
    store = TraceStore(database_url())
    try:
        children = [r for r in store.runs(spec="drafty", limit=500) if r.parent_run_id]
        assert {r.parent_run_id for r in children} == {round_id}
        assert all(r.verification for r in children)
        assert not any(
            r.verification for r in store.runs(spec="drafty", limit=500) if not r.parent_run_id
        )
        assert len(children) == 8 * (1 + len(result.proposals))
        kept = store.proposal(tier.id)
        assert kept is not None and kept.verdict == "verified" and kept.status == "proposed"
    finally:
        store.close()

    # Applied through the CLI, the file becomes the candidate and still compiles.
    applied = await run_armature("proposals", "apply", tier.id, str(path))
    assert applied.returncode == 0, applied.stderr
    assert "draft.model_tier: small → frontier" in applied.stdout
    new_plan = compile_spec(load_spec(path))
    assert new_plan.stage("draft").role is not None
    assert new_plan.stage("draft").role.model_tier == "frontier"
    assert new_plan.spec_hash == tier.candidate_spec_hash
    again = await run_armature("proposals", "apply", tier.id, str(path))
    assert again.returncode == 2 and "already applied" in again.stderr


async def test_a_round_at_target_or_without_surfaces_stops_with_the_reason(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    assert "valid_rate: 0.1, quality: 0.5" in SPEC
    good = (
        SPEC.replace("valid_rate: 0.1, quality: 0.5", "valid_rate: 1.0, quality: 0.99")
        .replace("target_hqs: 0.99", "target_hqs: 0.5")
        .replace("name: drafty", "name: drafty-good")
    )
    path = tmp_path / "good.yaml"
    path.write_text(good)
    async with build_worker(client, task_queue):
        plan = plan_from(good)
        for i in range(8):
            await (await start(client, plan, task_queue, run_id=f"good-{i}")).result()
        at_target = await _improve(client, task_queue, good, path, "improve-good-1")
        bare_text = good.replace("  editable_surfaces: [draft.model_tier, draft.description]\n", "")
        bare = await _improve(client, task_queue, bare_text, path, "improve-good-2")
    assert at_target.status == "at_target" and "target_hqs 0.5" in at_target.detail
    assert bare.status == "no_candidates" and "editable_surfaces" in bare.detail


TOOL_CASES = [
    # (the stage's tool, the error type, words in the error)
    ("{name: file_read, args: {path: missing.txt}}", "tool_error", "missing.txt"),  # it ran
    (
        "{name: file_list, args: {}}",
        "policy_blocked",
        "rejected by verification run: not approved: a verification run never approves a gate",
    ),
    (
        "{name: file_write, args: {path: notes/x.txt, content: hi}}",
        "policy_blocked",
        "is reversibility 'partial', and verification runs only make calls",
    ),
    (
        "{name: http_request, args: {url: 'https://example.com', method: POST}}",
        "policy_blocked",
        "is reversibility 'none', and verification runs only make calls",
    ),
]


async def test_verification_runs_approve_no_gate_and_make_only_reversible_tool_calls(
    client: Client, task_queue: str
) -> None:
    triage = compile_spec(load_spec(SPECS / "customer-triage.yaml"))
    outcomes = []
    async with build_worker(client, task_queue):
        gated = await client.execute_workflow(
            "RunSpec",
            RunInput(
                plan=triage, inputs={"ticket": "refund", "customer_tier": "pro"}, verification=True
            ),
            id="verify-gates-1",
            task_queue=task_queue,
            result_type=RunResult,
        )
        for i, (tool, _, _) in enumerate(TOOL_CASES):
            spec = (
                f"name: tooly{i}\nhttp_allow_hosts: [example.com]\nsafety_rules:\n"
                "  - {tool: file_list, action: require_approval, message: needs a person}\n"
                f"stages:\n  - {{id: t, tool: {tool}}}\n"
            )
            handle = await client.start_workflow(
                "RunSpec",
                RunInput(plan=plan_from(spec), inputs={}, verification=True),
                id=f"verify-tools-{i}",
                task_queue=task_queue,
                result_type=RunResult,
            )
            outcomes.append(await run_outcome(handle))
    # The gate is never approved: the run completes with the stages before it.
    held = gated.stages["approve_reply"]
    assert gated.state == "completed", gated.reason
    assert (held.status, held.error_type, held.gate) == ("skipped", "verification_gate", None)
    assert "never approves a gate" in (held.error or "")
    assert gated.stages["draft_reply"].status == "completed"
    assert "approve_reply" not in gated.outputs
    for (tool, error_type, words), outcome in zip(TOOL_CASES, outcomes, strict=True):
        assert outcome is not None, tool
        stage = outcome.stages["t"]
        assert stage.error_type == error_type, (tool, stage.error)
        assert words in (stage.error or ""), (tool, stage.error)


async def test_improve_cli_refuses_a_spec_without_the_block() -> None:
    done = await run_armature("improve", "specs/quickstart.yaml")
    assert done.returncode == 2
    assert "has no self_improvement block" in done.stderr
    assert "editable_surfaces" in done.stderr
    assert "started the local Temporal dev server" not in done.stderr


PREDICTY = SPEC.replace("name: drafty", "name: predicty").replace(
    "[draft.model_tier, draft.description]", "[draft.model_tier]"
)


async def _runs_of(client: Client, task_queue: str, text: str, prefix: str, n: int) -> None:
    plan = plan_from(text)
    for i in range(n):
        handle = await start(
            client, plan, task_queue, {"topic": f"topic {i}"}, run_id=f"{prefix}-{i}"
        )
        await handle.result()


async def test_the_round_after_an_applied_change_verifies_its_predicted_fix(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    path = tmp_path / "predicty.yaml"
    path.write_text(PREDICTY)
    async with build_worker(client, task_queue):
        await _runs_of(client, task_queue, PREDICTY, "predicty-v1", 10)
        first = await _improve(client, task_queue, PREDICTY, path, "improve-predicty-1")
        assert first.status == "proposed", first.detail
        (tier,) = first.proposals
        assert tier.verdict == "verified", tier.detail
        # The low valid_rate shows as invalid output on draft; the tier change predicts its fix.
        assert "output_invalid:draft" in tier.base_failures
        assert "output_invalid:draft" in tier.predicted_fixes
        assert first.verification is not None and first.verification.proposal_id is None

        applied = await run_armature("proposals", "apply", tier.id, str(path))
        assert applied.returncode == 0, applied.stderr
        new_text = path.read_text()
        await _runs_of(client, task_queue, new_text, "predicty-v2", 10)
        second = await _improve(client, task_queue, new_text, path, "improve-predicty-2")

    check = second.verification
    assert check is not None, second.detail
    assert check.proposal_id == tier.id and check.spec_hash == tier.candidate_spec_hash
    assert "output_invalid:draft" in check.verified_fixes
    assert "output_invalid:draft" not in check.current_failures
    assert check.unexpected_regressions == [] and check.drift == 0.0

    shown = await run_armature("improve", "history", str(path), "--json")
    assert shown.returncode == 0, shown.stderr
    history = json.loads(shown.stdout)
    assert [r["id"] for r in history["rounds"]] == ["improve-predicty-1", "improve-predicty-2"]
    assert history["rounds"][0]["proposals"][0]["predicted_fixes"] == tier.predicted_fixes
    assert history["rounds"][0]["mean_hqs"] is not None
    assert "output_invalid:draft" in history["rounds"][1]["verification"]["verified_fixes"]
    assert [a["proposal_id"] for a in history["applied"]] == [tier.id]
    text_view = await run_armature("improve", "history", "predicty")
    assert text_view.returncode == 0, text_view.stderr
    assert f"applied {tier.id}" in text_view.stdout
    (line,) = [ln for ln in text_view.stdout.splitlines() if f"applied {tier.id}:" in ln]
    assert "verified fixes" in line and "output_invalid:draft" in line.split("; missed")[0]
