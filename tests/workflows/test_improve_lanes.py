"""Review lanes on a real Temporal dev server (issue #17, item 2): a round with
``auto_apply: true`` verifies a tier change (review lane), so it writes it to
``<spec>.pending.yaml`` and leaves the live spec alone; ``armature improve SPEC
--apply-pending --yes`` then promotes it."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from armature_temporal.improve.pending import pending_path, read_pending
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import run_armature, run_history
from tests.workflows.test_improve import SPEC, _improve
from worker import build_worker

# The better tier is served from another endpoint, so switching to it sends the stage's data
# somewhere new: review lane, however well it verifies.
LANES_SPEC = SPEC.replace(
    "editable_surfaces: [draft.model_tier, draft.description]",
    "editable_surfaces: [draft.model_tier]\n  auto_apply: true",
).replace(
    "frontier: {provider: simulate,",
    'frontier: {provider: simulate, api_base: "https://frontier.example/v1",',
)


async def test_a_verified_review_lane_change_is_pending_never_auto_applied(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    assert "auto_apply: true" in LANES_SPEC
    path = tmp_path / "drafty.yaml"
    path.write_text(LANES_SPEC)
    async with build_worker(client, task_queue):
        await run_history(client, task_queue, LANES_SPEC, "drafty", 10)
        result = await _improve(client, task_queue, LANES_SPEC, path, "improve-drafty-lanes")
    assert result.status == "proposed", result.detail
    (tier,) = result.proposals
    assert tier.verdict == "verified" and tier.changes[0].new == "frontier", tier.detail
    assert tier.lane == "review"
    assert tier.lane_reasons == ["draft: model tier changed (role.model_tier)"]
    settled = result.settled
    assert settled is not None and settled.applied is None  # auto_apply: true, still not
    assert settled.pending == tier.id and settled.pending_path == str(pending_path(path))
    assert path.read_text() == LANES_SPEC  # the live spec untouched
    assert read_pending(path).text == tier.spec_text
    store = TraceStore(database_url())
    try:
        kept = store.proposal(tier.id)
        assert kept is not None and kept.lane == "review" and kept.status == "proposed"
    finally:
        store.close()

    done = await run_armature("improve", str(path), "--apply-pending", "--yes")
    assert done.returncode == 0, done.stderr
    assert "+      model_tier: frontier" in done.stdout
    assert path.read_text() == tier.spec_text and not pending_path(path).exists()
    store = TraceStore(database_url())
    try:
        kept = store.proposal(tier.id)
        assert kept is not None and kept.status == "applied"
        last = store.last_applied("drafty")  # the next round checks its predictions
        assert last is not None and last.proposal_id == tier.id
        assert last.spec_hash == tier.candidate_spec_hash
    finally:
        store.close()
