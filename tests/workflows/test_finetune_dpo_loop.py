"""The fine-tune loop with ``finetune.method: dpo`` on a real Temporal dev server and the tiny
local model: preference pairs from real simulated runs (the same stage messages, one attempt
valid and one not), an SFT adapter trained first in the round on the stage's successful replies
and used as the DPO reference policy (the DPO adapter a delta on it, served as SFT + delta), or
the stage's verified SFT adapter when it has one; decided on held-out pairs and in paired runs
against the spec as it is, with the SFT adapter alone measured too, and kept with its
PreferenceReport naming its reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

pytest.importorskip("torch", reason="needs the finetune extra: pip install torch transformers peft")
pytest.importorskip("transformers", reason="needs the finetune extra")
pytest.importorskip("peft", reason="needs the finetune extra")

from armature_temporal.finetune.continual import FROZEN_DIR, adapter_chain
from armature_temporal.finetune.export import dpo_rows
from armature_temporal.finetune.models import (
    Adapter,
    FinetuneInput,
    FinetuneResult,
    PreferenceReport,
)
from armature_temporal.finetune.tiny import create_tiny_model
from armature_temporal.finetune.verify import preference_beats_base
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from armature_temporal.views import load_runs
from benchmarks.sao import loop_specs, run_versions
from tests.fakes import assert_replays, run_armature, run_round_cli
from worker import build_worker

STEPS = 40
TOPICS = 24


async def test_a_dpo_round_trains_on_an_sft_reference_and_measures_it_against_the_spec_and_sft(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    tiny = create_tiny_model(tmp_path / "models" / "tiny").resolve()
    # benchmarks/sao.py --loop's task: the spec first run with its tier at valid_rate 0.3, then
    # at 0.95 on the same inputs; where the first failed and the second did not, the stage was
    # sent the same messages twice, once failing: a preference pair.
    now, earlier = loop_specs("prefs", str(tiny), STEPS)
    spec = tmp_path / "specs" / "prefs.yaml"
    spec.parent.mkdir()
    spec.write_text(now)
    async with build_worker(client, task_queue):
        await run_versions(client, task_queue, [earlier], TOPICS)
        # Each input ran once: no prompt was sent twice, so there is no pair yet.
        early = await client.execute_workflow(
            "Finetune",
            FinetuneInput(spec_text=now, spec_path=str(spec)),
            id="finetune-prefs-early",
            task_queue=task_queue,
            result_type=FinetuneResult,
        )
        assert early.status == "too_few_examples"
        assert early.detail.startswith(
            f"card: 0 preference pairs (from 0 prompt(s) sent more than once in {TOPICS} "
            "run(s)), fewer than min_examples = 8 for method dpo; a pair is two attempts of the "
            "stage sent exactly the same messages where one did better; to get more, run the "
            "spec again on inputs it has already run"
        ), early.detail
        await run_versions(client, task_queue, [now], TOPICS)
        answer = await run_round_cli(client, task_queue, "finetune", str(spec))
        # The round's history replays on today's FinetuneWorkflow (the DPO branch included).
        await assert_replays(client, answer["finetune_id"])
    result = FinetuneResult.model_validate({k: v for k, v in answer.items() if k != "finetune_id"})
    assert result.status == "trained", result.detail
    (adapter,) = result.adapters
    report = adapter.report
    assert isinstance(report, PreferenceReport)
    store = TraceStore(database_url())
    try:
        runs = load_runs(store, spec="prefs", limit=100)
        # The loop counted the pairs dpo_rows finds (as the bandit ladder's sao rung does),
        # trained on some and held out the rest, and recorded the runs they came from.
        rows, _ = dpo_rows(runs, spec="prefs", stage="card", with_run_id=True)
        assert len(rows) >= 8 and adapter.examples == len(rows)
        assert report.train_pairs + report.eval_pairs == len(rows)
        assert report.steps == STEPS and report.eval_pairs >= 5
        pair_runs = {row[k] for row in rows for k in ("run_id", "rejected_run_id")}
        assert set(report.source_runs) == pair_runs
        assert pair_runs <= {r.run_id for r in runs if not r.verification}
        # The stage had no verified SFT adapter but enough successful replies: the round
        # trained one first (on replies outside the held-out pairs) and the DPO adapter is a
        # delta on it, frozen, with it as the reference policy; the report says so.
        sft = report.sft_report
        assert sft is not None and sft.adapter_dir.endswith("-sft")
        assert report.reference_adapter == sft.adapter_dir
        assert report.reference.startswith(
            f"an SFT adapter the round trained first on {sft.train_examples + sft.eval_examples} "
            "successful replies (the stage has no verified SFT adapter)"
        )
        assert f"reference policy: {report.reference}" in adapter.detail
        assert adapter_chain(adapter.path) == [Path(adapter.path) / FROZEN_DIR, Path(adapter.path)]
        # (a) held-out preference accuracy against the reference's 50%: whatever it is, it is
        # stored and decides whether paired runs are made.
        beats, said = preference_beats_base(report)
        assert said in adapter.detail and "vs 0.500 for its SFT reference" in said
        assert adapter.base_loss is None and adapter.heldout_loss is None
        paired = store.runs(spec="prefs", verification=True, limit=100)
        if not beats:
            assert adapter.verdict == "not_better" and not paired, adapter.detail
        else:
            # (b) paired runs on the held-out pairs' recorded inputs: the spec as it is, `card`
            # on the tiny model plus SFT + the DPO delta, and on the SFT adapter alone.
            n = adapter.paired_n
            assert n is not None and n >= 5 and len(paired) == 3 * n
            assert adapter.paired_diff is not None and adapter.paired_ci_low is not None
            assert report.vs_reference_n == n and report.vs_reference_diff is not None
            assert report.vs_reference_ci_low is not None
            assert report.vs_reference_ci_low <= report.vs_reference_diff
            assert "vs the SFT adapter alone: paired HQS difference" in adapter.detail
            # The verdict follows the interval vs the spec as it is (better, not no worse).
            if adapter.paired_ci_low <= 0:
                assert adapter.verdict == "paired_not_better", adapter.detail
            by_label = {
                label: [r.run_id for r in paired if f"/card/{label}/" in r.run_id]
                for label in ("with", "reference")
            }
            models = {
                label: {r.model for r in store.records(ids[0]) if r.kind == "attempt" and r.model}
                for label, ids in by_label.items()
            }
            assert models == {
                "with": {f"local:{tiny}+{adapter.path}"},
                "reference": {f"local:{tiny}+{sft.adapter_dir}"},
            }
        (kept,) = store.adapters(spec="prefs")
        assert kept == adapter and isinstance(kept.report, PreferenceReport)
        assert kept.report.sft_report == sft  # the figures are stored with the adapter
        if adapter.verdict != "verified":
            assert store.latest_adapter("prefs", "card") is None
    finally:
        store.close()
    meta = json.loads((Path(adapter.path) / "armature.json").read_text())
    assert meta["method"] == "dpo" and meta["verdict"] == adapter.verdict
    listed = await run_armature("adapters", "list", "--spec", "prefs")
    assert f"preference accuracy {report.accuracy:.3f}" in listed.stdout
    assert (
        f"DPO on {report.train_pairs} pairs, held out {report.eval_pairs} on an SFT reference"
        in listed.stdout
    )
    if adapter.paired_n is not None:
        assert f"n={adapter.paired_n}" in listed.stdout

    # A stage with a verified SFT adapter: the next round trains DPO on top of it and trains
    # no SFT adapter first. (The loop never verifies the tiny model's SFT adapter — it writes no
    # valid card — so this one is recorded verified here, as a round on a capable model would.)
    store = TraceStore(database_url())
    try:
        store.save_adapters(
            [
                Adapter(
                    id="prefs-card-sft",
                    spec_name="prefs",
                    stage="card",
                    base_model=str(tiny),
                    path=sft.adapter_dir,
                    created_at="2026-12-04T00:00:00+00:00",
                    finetune_run_id="finetune-prefs-earlier",
                    examples=sft.train_examples + sft.eval_examples,
                    report=sft,
                    verdict="verified",
                    detail="recorded verified by the test",
                )
            ]
        )
    finally:
        store.close()
    async with build_worker(client, task_queue):
        second = await client.execute_workflow(
            "Finetune",
            FinetuneInput(spec_text=now, spec_path=str(spec)),
            id="finetune-prefs-on-sft",
            task_queue=task_queue,
            result_type=FinetuneResult,
        )
        await assert_replays(client, "finetune-prefs-on-sft")
    (on_sft,) = second.adapters
    again = on_sft.report
    assert isinstance(again, PreferenceReport) and again.sft_report is None
    assert again.reference_adapter == sft.adapter_dir
    assert again.reference == "SFT adapter prefs-card-sft (the stage's newest verified one)"
    assert f"reference policy: {again.reference}" in on_sft.detail
    assert adapter_chain(on_sft.path) == [Path(on_sft.path) / FROZEN_DIR, Path(on_sft.path)]
