"""Scheduled improvement rounds against the simulator's ground truth (issue #17, acceptance),
CI-sized: benchmarks/improve.py's ``judged`` spec (a writer of low latent quality that only
its judge sees) for two rounds, with no reviewer: the first round's verified change (a tier
of the same provider, so the auto lane) applies itself and must raise the writer's latent
quality (which the loop never sees) and HQS on fresh paired inputs; the second round checks
that change's predicted fix and finds it verified."""

from __future__ import annotations

from pathlib import Path

from temporalio.client import Client

from benchmarks.improve import run_spec
from worker import build_worker


async def test_two_scheduled_rounds_apply_a_change_that_raises_latent_quality_and_hqs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    async with build_worker(client, task_queue):
        result = await run_spec(
            client,
            task_queue,
            "judged",
            tmp_path,
            rounds=2,
            runs=10,
            evals=8,
            seed="ci",
            reviewer="none",
        )
    original, first, second = result["rows"]
    assert first["status"] == "proposed" and first["verified"] == 1
    assert first["applied"] == ["write.model_tier: small → large", "auto"]
    # Ground truth: the simulator's tiers declare quality 0.45 (small) and 0.9 (large).
    assert original["latent"] < 0.55 and first["latent"] > 0.8
    assert first["step"]["ci_low"] > 0 and first["ci_low"] > 0  # HQS rose, paired 95%
    assert second["fix_share"] == 1.0  # low_judge:write, predicted and verified fixed
    assert second["drift"] == 0.0
    assert result["verdict"]["improved"] and result["verdict"]["round"] == 1
    assert result["verdict"]["harmful_rounds"] == []
    spec = (tmp_path / "improve-judged.yaml").read_text()
    assert "model_tier: large\n      description" in spec
