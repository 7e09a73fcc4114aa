"""The fine-tune loop with ``finetune.method: dpo`` on a real Temporal dev server and the tiny
local model: preference pairs from real simulated runs (the same stage messages, one attempt
valid and one not), a DPO adapter trained in its own activity, verified against the base model
on held-out pairs and in paired runs, and kept with its PreferenceReport."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

pytest.importorskip("torch", reason="needs the finetune extra: pip install torch transformers peft")
pytest.importorskip("transformers", reason="needs the finetune extra")
pytest.importorskip("peft", reason="needs the finetune extra")

from armature_temporal.finetune.export import dpo_rows
from armature_temporal.finetune.models import (
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


async def test_a_dpo_round_trains_on_preference_pairs_and_verifies_against_the_base_model(
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
            "run(s)), fewer than min_examples = 8 for method dpo; to get more, run the spec on "
            "inputs where the stage sometimes fails"
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
        # (a) held-out preference accuracy against the base model's 50% ...
        beats, said = preference_beats_base(report)
        assert said in adapter.detail
        assert adapter.base_loss is None and adapter.heldout_loss is None
        assert beats, adapter.detail  # 40 steps on these pairs rank every held-out pair right
        # ... (b) then paired runs on the held-out pairs' recorded inputs: the spec as it is
        # against `card` on the tiny model plus the adapter. The tiny model writes no valid
        # JSON card, so the spec is worse with it, not better: rejected, never served.
        assert adapter.paired_n is not None and adapter.paired_n >= 5
        assert adapter.paired_diff is not None and adapter.paired_diff < 0
        assert adapter.paired_ci_low is not None and adapter.paired_ci_low <= 0
        assert adapter.verdict == "paired_not_better", adapter.detail
        assert "reaches 0 or below: the spec is not shown better with it" in adapter.detail
        assert "0 verified (held-out preference accuracy above" in result.detail
        assert store.latest_adapter("prefs", "card") is None
        (kept,) = store.adapters(spec="prefs")
        assert kept == adapter and isinstance(kept.report, PreferenceReport)
        # The paired runs were verification runs: they never act.
        paired = store.runs(spec="prefs", verification=True, limit=100)
        assert len(paired) == 2 * adapter.paired_n
        with_runs = [r.run_id for r in paired if "/card/with/" in r.run_id]
        models = {r.model for r in store.records(with_runs[0]) if r.kind == "attempt" and r.model}
        assert models == {f"local:{tiny}+{adapter.path}"}
    finally:
        store.close()
    meta = json.loads((Path(adapter.path) / "armature.json").read_text())
    assert meta["method"] == "dpo" and meta["verdict"] == "paired_not_better"
    listed = await run_armature("adapters", "list", "--spec", "prefs")
    assert f"preference accuracy {report.accuracy:.3f}" in listed.stdout
    assert f"DPO on {report.train_pairs} pairs, held out {report.eval_pairs}" in listed.stdout
    assert f"n={adapter.paired_n}" in listed.stdout
