"""The fine-tune loop on a real Temporal dev server with a real (tiny, local) transformers
model: traces from real runs become examples, a LoRA adapter is trained and kept with its
held-out loss, and a `provider: local` tier with `adapter: latest` serves the stage with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client

pytest.importorskip("torch", reason="needs the finetune extra: pip install torch transformers peft")
pytest.importorskip("transformers", reason="needs the finetune extra")
pytest.importorskip("peft", reason="needs the finetune extra")

from armature_temporal.finetune.models import FinetuneInput, FinetuneResult
from armature_temporal.finetune.tiny import create_tiny_model
from armature_temporal.runtime_models import RunResult
from armature_temporal.store import TraceStore
from armature_temporal.store.engine import database_url
from tests.fakes import plan_from, run_armature, start
from worker import build_worker

SPEC = """\
name: echoer
model_tiers:
  small: {{provider: simulate, quality: 0.8}}
  mine: {{provider: local, model: {model}, adapter: latest, max_tokens: 24}}
inputs:
  type: object
  properties: {{word: {{type: string, default: reef}}}}
finetune:
  base_model: {model}
  target_stages: [answer]
  min_examples: 8
  max_steps: 40
  lora_rank: 4
stages:
  - id: answer
    role:
      name: Echo
      model_tier: {tier}
      description: "Say something about {{{{ inputs.word }}}}."
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return create_tiny_model(tmp_path_factory.mktemp("models") / "tiny")


async def test_a_round_trains_a_verified_adapter_that_a_local_tier_then_uses(
    client: Client, task_queue: str, tiny: Path, tmp_path: Path
) -> None:
    collect = SPEC.format(model=tiny, tier="small")
    path = tmp_path / "echoer.yaml"
    path.write_text(collect)
    plan = plan_from(collect)
    async with build_worker(client, task_queue):
        for i in range(3):
            await (await start(client, plan, task_queue, {"word": f"w{i}"})).result()
        early = await client.execute_workflow(
            "Finetune",
            FinetuneInput(spec_text=collect, spec_path=str(path)),
            id="finetune-echoer-early",
            task_queue=task_queue,
            result_type=FinetuneResult,
        )
        assert early.status == "too_few_examples"
        assert "answer: 3 distinct successful replies, fewer than min_examples = 8" in early.detail
        for i in range(3, 14):
            await (await start(client, plan, task_queue, {"word": f"w{i}"})).result()

        addr = str(client.service_client.config.target_host)
        done = await run_armature(
            "finetune",
            str(path),
            "--json",
            "--address",
            addr,
            "--task-queue",
            task_queue,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        result = FinetuneResult.model_validate(
            {k: v for k, v in json.loads(done.stdout).items() if k != "finetune_id"}
        )
        assert result.status == "trained", result.detail
        (adapter,) = result.adapters
        assert adapter.stage == "answer" and adapter.examples == 14
        assert adapter.report.steps == 40
        assert adapter.report.eval_loss_after < adapter.report.eval_loss_before
        assert adapter.verdict == "verified"
        config = json.loads((Path(adapter.path) / "adapter_config.json").read_text())
        assert config["r"] == 4  # finetune.lora_rank
        assert json.loads((Path(adapter.path) / "armature.json").read_text())["adapter_id"] == (
            adapter.id
        )

        # The same spec with the stage on the local tier: `adapter: latest` loads it.
        serve = SPEC.format(model=tiny, tier="mine")
        served = await start(client, plan_from(serve), task_queue, {"word": "kelp"})
        outcome: RunResult = await served.result()
    assert outcome.stages["answer"].status == "completed"
    store = TraceStore(database_url())
    try:
        (attempt,) = [r for r in store.records(served.id) if r.kind == "attempt"]
        assert attempt.model == f"local:{tiny}+{adapter.path}"
        assert store.latest_adapter("echoer", "answer") == adapter
    finally:
        store.close()
    listed = await run_armature("adapters", "list", "--spec", "echoer")
    assert adapter.id in listed.stdout and "verified" in listed.stdout


async def test_finetune_cli_refuses_a_spec_without_the_block() -> None:
    done = await run_armature("finetune", "specs/quickstart.yaml")
    assert done.returncode == 2
    assert "has no finetune block" in done.stderr and "base_model" in done.stderr
