"""A spec with ``knowledge:`` run as a user runs it (issue #30 item 7): ``armature run`` indexes
its documents first (only those that changed), names a source it refused — outside the spec's
folder, absolute, missing — and indexes the rest; ``armature report`` shows the passages each
stage saw, with their references and hashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.store import TraceStore
from tests.fakes import SPECS, run_armature
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


def _address(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


async def test_run_indexes_the_specs_documents_and_report_shows_the_passages_seen(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, armature_home: Path
) -> None:
    common = ["--address", _address(temporal_env), "--task-queue", task_queue]
    async with build_worker(client, task_queue):
        first = await run_armature(
            "run", str(SPECS / "knowledge-qa.yaml"), "--json", *common, timeout=180
        )
        again = await run_armature(
            "run",
            str(SPECS / "knowledge-qa.yaml"),
            "--json",
            "--input",
            "question=Where do you ship from?",
            *common,
            timeout=180,
        )
    assert first.returncode == 0, first.stderr
    for name in ("refunds.md", "shipping.md", "warranty.md"):
        assert f"indexed knowledge-qa/policies/{name}" in first.stderr
    assert "3 indexed, 0 unchanged, 0 not readable" in first.stderr
    assert again.returncode == 0, again.stderr
    assert "indexed" not in again.stderr  # nothing changed: nothing indexed again
    run_id = json.loads(first.stdout)["run_id"]
    report = await run_armature("report", run_id, "--json")
    assert report.returncode == 0, report.stderr
    stages = {s["stage_id"]: s for s in json.loads(report.stdout)["stages"]}
    (seen,) = stages["answer"]["retrievals"]
    refs = [p["ref"] for p in seen["passages"]]
    # the refund question's best passages come from the refunds policy (their order is the
    # store's ranking)
    assert len(refs) == 3 and refs[0].startswith("knowledge:knowledge-qa/policies/refunds.md#")
    assert all(len(p["sha256"]) == 64 for p in seen["passages"])
    text = await run_armature("report", run_id)
    assert refs[0] in text.stdout
    assert "passages it saw" in text.stdout
    assert "candidates" not in first.stderr  # candidates are not indexed until added


async def test_sources_outside_the_specs_folder_are_named_and_the_rest_indexed(
    temporal_env: WorkflowEnvironment,
    client: Client,
    task_queue: str,
    armature_home: Path,
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("# Keys\n\nThe deploy key is hunter2.\n", encoding="utf-8")
    folder = tmp_path / "spec"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "faq.md").write_text("# FAQ\n\nWe open at nine.\n", encoding="utf-8")
    (folder / "docs" / "leak.md").symlink_to(secret)
    spec = folder / "kb.yaml"
    spec.write_text(
        f"""\
name: kb-refusals
model_tiers: {{small: {{provider: simulate, valid_rate: 1.0}}}}
knowledge:
  embedder: lexical
  sources: [docs/, ../secret.md, {secret}, missing/*.md]
stages:
  - id: answer
    role: {{model_tier: small, description: "When do you open?"}}
    retrieve: {{query: "opening hours", k: 2}}
""",
        encoding="utf-8",
    )
    common = ["--address", _address(temporal_env), "--task-queue", task_queue]
    async with build_worker(client, task_queue):
        done = await run_armature("run", str(spec), "--json", *common, timeout=180)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "indexed docs/faq.md" in err
    assert "not indexed: docs/leak.md" in err and "outside the spec's folder" in err
    assert "not indexed: ../secret.md" in err
    assert f"not indexed: {secret}" in err and "relative to the spec's folder" in err
    assert "not indexed: missing/*.md: the pattern matches no file" in err
    assert "1 indexed, 0 unchanged, 4 not readable" in err
    search = await run_armature(
        "knowledge", "search", "deploy key", "--collection", "kb-refusals", "--json"
    )
    assert "hunter2" not in search.stdout  # the secret never reached the index
    # knowledge.embedder chose the collection's embedder
    assert {s.embedder for s in TraceStore().knowledge_sources("kb-refusals")} == {"lexical"}
