"""The fine-tune loop on a real Temporal dev server with a real (tiny, local) transformers
model: traces from real runs become examples, a LoRA adapter is trained and kept with its
held-out loss against the base model's and its paired runs with and without it, and a
`provider: local` tier with `adapter: latest` serves the stage with it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import Client

pytest.importorskip("torch", reason="needs the finetune extra: pip install torch transformers peft")
pytest.importorskip("transformers", reason="needs the finetune extra")
pytest.importorskip("peft", reason="needs the finetune extra")

from armature_temporal.finetune.models import FinetuneInput, FinetuneResult
from armature_temporal.runtime.models import RunResult
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import SPECS, run_armature, run_round_cli, start
from worker import build_worker


@pytest.fixture
def distill(tmp_path: Path) -> tuple[Path, Path]:
    """specs/distill.yaml as a user runs it: the spec in specs/, the tiny model it names at
    ../models/tiny (written offline by armature_temporal.finetune.tiny)."""
    spec = tmp_path / "specs" / "distill.yaml"
    spec.parent.mkdir()
    spec.write_text((SPECS / "distill.yaml").read_text())
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "armature_temporal.finetune.tiny",
            str(tmp_path / "models" / "tiny"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return spec, tmp_path / "models" / "tiny"


async def test_the_distill_example_trains_an_adapter_that_its_local_tier_then_serves(
    client: Client, task_queue: str, distill: tuple[Path, Path]
) -> None:
    spec, tiny = distill
    text = spec.read_text()
    plan = compile_spec(load_spec(spec))
    async with build_worker(client, task_queue):
        for i in range(3):
            await (await start(client, plan, task_queue, {"topic": f"t{i}"})).result()
        early = await client.execute_workflow(
            "Finetune",
            FinetuneInput(spec_text=text, spec_path=str(spec)),
            id="finetune-distill-early",
            task_queue=task_queue,
            result_type=FinetuneResult,
        )
        assert early.status == "too_few_examples"
        assert "summary: 3 distinct successful replies, fewer than min_examples = 8" in (
            early.detail
        )
        for i in range(3, 16):
            await (await start(client, plan, task_queue, {"topic": f"t{i}"})).result()

        answer = await run_round_cli(client, task_queue, "finetune", str(spec))
        result = FinetuneResult.model_validate(
            {k: v for k, v in answer.items() if k != "finetune_id"}
        )
        assert result.status == "trained", result.detail
        (adapter,) = result.adapters
        assert adapter.stage == "summary" and adapter.examples == 16
        assert adapter.report.steps == 60  # finetune.max_steps
        # (a) the held-out loss beats the base model's on the same held-out examples (measured
        # again with the adapter switched off: the base weights are untouched) ...
        assert adapter.report.eval_examples >= 5  # finetune.eval_share: 0.5
        assert adapter.base_loss is not None and adapter.base_loss == adapter.report.base_loss
        assert adapter.base_loss == pytest.approx(adapter.report.eval_loss_before, abs=1e-4)
        assert adapter.heldout_loss == adapter.report.eval_loss_after < adapter.base_loss
        # (b) ... and paired runs on the held-out inputs, the spec as it is vs `summary` on
        # the tiny model plus this adapter, are no worse (non-inferiority, margin 0.02) ...
        assert adapter.paired_n is not None and adapter.paired_n >= 5
        assert adapter.paired_ci_low is not None and adapter.paired_ci_low > -0.02
        # ... but distill.yaml has no judge: HQS cannot see whether the tiny model's replies
        # are any good (they were noise, and tied), so it is unmeasurable, never verified.
        assert adapter.verdict == "unmeasurable", adapter.detail
        assert "no judge that reads text reads 'summary'" in adapter.detail
        assert f"trained on {adapter.report.train_examples} examples" in adapter.detail
        config = json.loads((Path(adapter.path) / "adapter_config.json").read_text())
        assert config["r"] == 8  # finetune.lora_rank
        meta = json.loads((Path(adapter.path) / "armature.json").read_text())
        assert meta["adapter_id"] == adapter.id and meta["verdict"] == "unmeasurable"

        # tier=mine: `latest:summary` loads only a verified adapter, so the base model serves.
        served = await start(client, plan, task_queue, {"topic": "kelp", "tier": "mine"})
        outcome: RunResult = await served.result()
        # An adapter pinned by its directory is served as it is.
        pinned_text = text.replace('adapter: "latest:summary"', f"adapter: {adapter.path}")
        pinned_spec = spec.with_name("pinned.yaml")
        pinned_spec.write_text(pinned_text)
        pinned = await start(
            client, compile_spec(load_spec(pinned_spec)), task_queue, {"tier": "mine"}
        )
        await pinned.result()
    assert outcome.stages["summary"].status == "skipped"
    assert outcome.stages["summary_local"].status == "completed"
    store = TraceStore(database_url())
    try:
        (attempt,) = [r for r in store.records(served.id) if r.kind == "attempt"]
        assert attempt.model == f"local:{tiny.resolve()}"
        assert store.latest_adapter("distill", "summary") is None
        (attempt,) = [r for r in store.records(pinned.id) if r.kind == "attempt"]
        assert attempt.model == f"local:{tiny.resolve()}+{adapter.path}"
        # The paired runs were verification runs of the round: the `with` side on the adapter.
        paired = store.runs(spec="distill", verification=True, limit=100)
        assert len(paired) == 2 * adapter.paired_n
        with_runs = [r.run_id for r in paired if "/summary/with/" in r.run_id]
        assert len(with_runs) == adapter.paired_n
        models = {r.model for r in store.records(with_runs[0]) if r.kind == "attempt" and r.model}
        assert models == {f"local:{tiny.resolve()}+{adapter.path}"}
    finally:
        store.close()
    listed = await run_armature("adapters", "list", "--spec", "distill")
    assert adapter.id in listed.stdout and "unmeasurable" in listed.stdout
    assert f"loss {adapter.heldout_loss:.3f} vs base {adapter.base_loss:.3f}" in listed.stdout
    assert f"n={adapter.paired_n}" in listed.stdout
    # One count: what finetune said it trained on is what the list says (it said 16 before).
    assert f"trained on {adapter.report.train_examples}, held out" in listed.stdout
    as_json = await run_armature("adapters", "list", "--spec", "distill", "--json")
    (row,) = json.loads(as_json.stdout)
    assert row["verdict"] == "unmeasurable" and row["paired_n"] == adapter.paired_n
    assert row["base_loss"] == adapter.base_loss and row["paired_diff"] == adapter.paired_diff


async def test_finetune_cli_refuses_a_spec_without_the_block() -> None:
    done = await run_armature("finetune", "specs/quickstart.yaml")
    assert done.returncode == 2
    assert "has no finetune block" in done.stderr and "base_model" in done.stderr


async def test_a_missing_base_model_fails_the_round_with_the_path_and_the_fix(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = tmp_path / "nobase.yaml"
    spec.write_text(
        "name: nobase\nfinetune: {base_model: ./no-such-model}\n"
        "stages: [{id: a, role: {name: A, description: x}}]\n"
    )
    addr = str(client.service_client.config.target_host)
    async with build_worker(client, task_queue):
        done = await run_armature(
            "finetune", str(spec), "--address", addr, "--task-queue", task_queue
        )
    assert done.returncode == 1
    assert "finetune.base_model './no-such-model' is not a directory on this worker" in (
        done.stderr
    )
    assert "nothing is downloaded" in done.stderr


CARD = """\
name: card
inputs:
  type: object
  properties:
    topic: {type: string}
model_tiers:
  small: {provider: simulate}
  # The spec's own local tier on the base model: two tokens is too few for a JSON card.
  mine: {provider: local, model: ../models/tiny, max_tokens: 2}
finetune: {base_model: ../models/tiny, min_examples: 8, max_steps: 60, eval_share: 0.5}
stages:
  - id: card
    role: {name: Carder, model_tier: small, description: "Describe {{ inputs.topic }}."}
    output_mode: json
    output_schema: {type: object, properties: {title: {type: string}}, required: [title]}
"""


async def test_an_adapter_that_beats_the_base_loss_but_fails_in_the_spec_is_not_verified(
    client: Client, task_queue: str, distill: tuple[Path, Path]
) -> None:
    spec = distill[0].parent / "card.yaml"
    spec.write_text(CARD)
    plan = compile_spec(load_spec(spec))
    async with build_worker(client, task_queue):
        for i in range(16):
            await (await start(client, plan, task_queue, {"topic": f"t{i}"})).result()
        result = await client.execute_workflow(
            "Finetune",
            FinetuneInput(spec_text=CARD, spec_path=str(spec)),
            id="finetune-card",
            task_queue=task_queue,
            result_type=FinetuneResult,
        )
    (adapter,) = result.adapters
    assert adapter.heldout_loss is not None and adapter.base_loss is not None
    assert adapter.heldout_loss < adapter.base_loss  # (a) holds ...
    assert adapter.paired_n is not None and adapter.paired_n >= 5
    # ... but served with the spec's two-token local tier, every card is cut off: (b) fails.
    assert adapter.paired_diff is not None and adapter.paired_diff < -0.02
    assert adapter.verdict == "paired_worse", adapter.detail
    assert "0 verified" in result.detail
    store = TraceStore(database_url())
    try:
        assert store.latest_adapter("card", "card") is None  # `adapter: latest` never loads it
    finally:
        store.close()
