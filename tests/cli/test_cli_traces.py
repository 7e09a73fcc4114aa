"""`armature report | dashboard | traces verify | export-traces | runs list` over the trace store,
run as a user runs them: the console script in a subprocess, reading a store that real runs on a
real Temporal dev server (with an in-process worker) wrote."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from armature_temporal.service.client import start_run
from armature_temporal.spec.compiler import compile_spec
from armature_temporal.spec.loader import load_spec_text
from armature_temporal.store import TraceStore
from tests.fakes import free_port, run_armature
from tests.workflows.test_ledger_anchor import anchored
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
ARMATURE = str(Path(sys.executable).parent / "armature")

# The small tier never produces valid output: every outline takes 2 attempts on `small`, then
# escalates to `frontier`, where the third attempt is valid. The gate decides itself after 1s.
SPEC = """\
name: retrying
version: "{version}"
inputs: [topic]
model_tiers:
  small: {{provider: simulate, valid_rate: 0.0}}
  frontier: {{provider: simulate, valid_rate: 1.0, quality: 0.9}}
stages:
  - id: outline
    role:
      name: Outliner
      model_tier: small
      description: "List three points about {{{{ topic }}}}."
    output_mode: json
    output_schema:
      type: object
      properties: {{points: {{type: array, items: {{type: string}}, minItems: 1}}}}
      required: [points]
    on_fail: {{loop: {{max: 1}}, escalate: true}}
  - id: publish
    depends_on: [outline]
    gate: {{type: human, timeout: 1s, on_timeout: approve}}
  - id: review
    depends_on: [publish]
    role:
      name: Editor
      type: judge
      description: "Score these points: {{{{ outline.points }}}}"
"""


async def cli(*args: str, home: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # An empty ARMATURE_DB_URL falls back to SQLite under this test's ARMATURE_HOME.
    env = {"ARMATURE_HOME": str(home), "ARMATURE_DB_URL": ""}
    result: subprocess.CompletedProcess[str] = await run_armature(*args, env=env, timeout=timeout)
    return result


class Traced:
    def __init__(self, home: Path, runs: dict[str, list[str]]) -> None:
        self.home = home
        self.runs = runs  # spec version -> run ids

    def copy(self, dest: Path) -> Path:
        """A copy of the store and its trace key in its own ARMATURE_HOME, for tests that
        damage it."""
        dest.mkdir(parents=True)
        shutil.copy2(self.home / "trace.key", dest / "trace.key")
        with (
            sqlite3.connect(self.home / "armature.db") as src,
            sqlite3.connect(dest / "armature.db") as dst,
        ):
            src.backup(dst)
        return dest


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def traced(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Traced]:
    """Three finished runs in one store: two of version 1 and one of version 2."""
    home = tmp_path_factory.mktemp("traced-home")
    queue = "tq-traces-cli"
    saved = os.environ.get("ARMATURE_HOME")
    os.environ["ARMATURE_HOME"] = str(home)  # where the in-process worker writes traces
    try:
        plans = {v: compile_spec(load_spec_text(SPEC.format(version=v))) for v in ("1", "2")}
        async with build_worker(temporal_env.client, queue):
            handles = {
                v: [
                    await start_run(temporal_env.client, plans[v], {"topic": t}, task_queue=queue)
                    for t in (["reefs", "tides"] if v == "1" else ["kelp"])
                ]
                for v in plans
            }
            for group in handles.values():
                for handle in group:
                    await handle.result()
    finally:
        if saved is None:
            os.environ.pop("ARMATURE_HOME", None)
        else:
            os.environ["ARMATURE_HOME"] = saved
    yield Traced(home, {v: [h.id for h in group] for v, group in handles.items()})


async def test_report_shows_every_attempt_of_a_retried_escalated_run(traced: Traced) -> None:
    run_id = traced.runs["1"][0]
    shown = await cli("report", run_id, home=traced.home)
    as_json = await cli("report", run_id, "--json", home=traced.home)
    assert shown.returncode == 0, shown.stderr
    assert as_json.returncode == 0, as_json.stderr
    report = json.loads(as_json.stdout)
    stages = {s["stage_id"]: s for s in report["stages"]}
    assert list(stages) == ["outline", "publish", "review"]
    outline = stages["outline"]
    assert (outline["status"], outline["attempts"], outline["escalated"]) == ("completed", 3, True)
    tried = outline["attempt_records"]
    assert [(a["attempt"], a["tier"], a["valid"]) for a in tried] == [
        (1, "small", False),
        (2, "small", False),
        (3, "frontier", True),
    ]
    assert all(a["error"] for a in tried[:2]) and tried[2]["error"] is None
    assert stages["review"]["judge_score"] is not None
    assert report["gates"] == [
        {
            "stage_id": "publish",
            "decision": "approve",
            "by": "timeout",
            "comment": "timed out after 1s",
            "decided_at": report["gates"][0]["decided_at"],
            "claimed_by": None,
            "verified": True,  # its row checks against its MAC
            "unverified": None,
        }
    ]
    assert report["status"] == "completed" and report["hqs"] is not None
    assert report["prompt_tokens"] == sum(
        a["prompt_tokens"] for s in report["stages"] for a in s["attempt_records"]
    )
    text = shown.stdout
    assert run_id in text and "attempts (4)" in text  # 3 outline + 1 review
    assert text.count("frontier") >= 2 and "gate decisions" in text and "timeout" in text

    missing = await cli("report", "no-such-run", home=traced.home)
    assert missing.returncode == 2 and "no run 'no-such-run' in the trace store" in missing.stderr


async def test_dashboard_json_has_hqs_per_spec_version_and_taxonomy_counts(
    traced: Traced,
) -> None:
    result = await cli("dashboard", "retrying", "--json", home=traced.home)
    assert result.returncode == 0, result.stderr
    board = json.loads(result.stdout)
    assert board["spec_name"] == "retrying" and board["runs"] == 3
    versions = {v["spec_version"]: v for v in board["versions"]}
    assert sorted(versions) == ["1", "2"]  # one entry per spec_hash, oldest first:
    firsts = [v["first_started"] for v in board["versions"]]
    assert firsts == sorted(firsts)
    assert versions["1"]["spec_hash"] != versions["2"]["spec_hash"]
    for version, runs in (("1", 2), ("2", 1)):
        stats = versions[version]
        assert stats["runs"] == runs and stats["completed"] == runs
        assert len(stats["hqs"]["series"]) == runs
        assert len(stats["hqs"]["sparkline"]) == runs
        assert 0 < stats["hqs"]["mean"] <= 1
        # two invalid attempts per run on `small`, and nothing else went wrong
        assert stats["taxonomy"]["output_invalid"] == 2 * runs
        assert sum(stats["taxonomy"].values()) == 2 * runs
        assert stats["latency_p95_ms"] >= stats["latency_p50_ms"] > 0
        tiers = {(c["stage_id"], c["tier"]): c for c in stats["configurations"]}
        assert tiers[("outline", "small")]["attempts"] == 2 * runs
        assert tiers[("outline", "small")]["valid_rate"] == 0
        assert tiers[("outline", "frontier")]["valid_rate"] == 1
    assert board["taxonomy"]["output_invalid"] == 6
    assert set(board["taxonomy"]) >= {"tool_error", "timeout", "gate_rejected"}

    shown = await cli("dashboard", "retrying", home=traced.home)
    assert shown.returncode == 0, shown.stderr
    assert "HQS per spec version" in shown.stdout and "output_invalid" in shown.stdout
    overview = await cli("dashboard", "--json", home=traced.home)
    assert [s["spec_name"] for s in json.loads(overview.stdout)] == ["retrying"]
    unknown = await cli("dashboard", "retryng", home=traced.home)
    assert unknown.returncode == 2 and "did you mean 'retrying'" in unknown.stderr


def _watch_two_redraws(home: Path) -> tuple[list[str], int]:
    env = {**os.environ, "ARMATURE_HOME": str(home)}
    args = [ARMATURE, "dashboard", "retrying", "--watch", "--json", "--interval", "0.2"]
    with subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env) as proc:
        assert proc.stdout is not None
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        proc.send_signal(signal.SIGINT)
        return lines, proc.wait(timeout=30)


async def test_dashboard_watch_json_prints_a_document_per_redraw_until_ctrl_c(
    traced: Traced,
) -> None:
    lines, code = await asyncio.to_thread(_watch_two_redraws, traced.home)
    assert code == 0
    assert [json.loads(line)["runs"] for line in lines] == [3, 3]


async def test_verify_passes_on_a_clean_store_and_names_the_edited_record(
    traced: Traced, temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    # Without Temporal nothing is proven: every run is unanchored, never intact (exit 3).
    offline = await cli("traces", "verify", home=traced.home)
    assert offline.returncode == 3, offline.stdout + offline.stderr
    assert "3 run(s) checked: 0 intact, 3 unanchored" in offline.stderr
    assert "not compared with Temporal: no Temporal server configured" in offline.stdout
    accepted = await cli("traces", "verify", "--allow-unanchored", home=traced.home)
    assert accepted.returncode == 0 and "accepted (--allow-unanchored)" in accepted.stdout

    client = temporal_env.client
    store = TraceStore(f"sqlite:///{traced.home / 'armature.db'}")
    try:
        await anchored(client, store)  # the ledger's head, sent in the background
    finally:
        store.close()
    address = str(client.service_client.config.target_host)
    clean = await cli("traces", "verify", "--address", address, home=traced.home)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert (
        "3 run(s) checked: 3 intact (chain, mac, summary_mac, ledger, temporal_anchor, "
        "ledger_anchor): every check holds"
    ) in clean.stdout
    assert "ledger: ok: anchored in Temporal up to its last entry (6)" in clean.stdout

    home = traced.copy(tmp_path / "tampered")
    run_id = traced.runs["1"][1]
    with sqlite3.connect(home / "armature.db") as db:
        row_id, seq, output = db.execute(
            "SELECT id, seq, output FROM trace_records "
            "WHERE run_id = ? AND kind = 'attempt' AND output_valid = 1 AND stage_id = 'outline'",
            (run_id,),
        ).fetchone()
        at = next(i for i, ch in enumerate(output) if ch.isalpha())
        edited = output[:at] + chr(ord(output[at]) ^ 1) + output[at + 1 :]  # one byte
        db.execute("UPDATE trace_records SET output = ? WHERE id = ?", (edited, row_id))

    broken = await cli("traces", "verify", home=home)
    assert broken.returncode == 1
    assert f"{run_id}: chain: edited: record {seq} (attempt outline) does not match its hash" in (
        broken.stdout
    )
    assert "3 run(s) checked: 0 intact, 2 unanchored, 1 broken" in broken.stderr
    one = await cli("traces", "verify", run_id, "--json", home=home)
    assert one.returncode == 1
    assert json.loads(one.stdout)["breaks"] == [
        {
            "run_id": run_id,
            "check": "chain",
            "seq": seq,
            "problem": "edited",
            "detail": f"record {seq} (attempt outline) does not match its hash: its content "
            "was changed",
        }
    ]
    other = await cli("traces", "verify", traced.runs["2"][0], home=home)
    assert other.returncode == 3  # nothing failed for it, but offline nothing is proven


async def test_verify_notices_a_run_whose_records_were_all_deleted(
    traced: Traced, tmp_path: Path
) -> None:
    home = traced.copy(tmp_path / "emptied")
    run_id = traced.runs["2"][0]
    with sqlite3.connect(home / "armature.db") as db:
        db.execute("DELETE FROM trace_records WHERE run_id = ?", (run_id,))
    result = await cli("traces", "verify", "--json", home=home)
    assert result.returncode == 1
    breaks = json.loads(result.stdout)["breaks"]
    assert [(b["run_id"], b["check"], b["problem"]) for b in breaks] == [
        (run_id, "chain", "deleted"),
        (run_id, "ledger", "mismatch"),
    ]
    unknown = await cli("traces", "verify", "no-such-run", home=home)
    assert unknown.returncode == 2


async def test_runs_list_falls_back_to_the_store_when_temporal_is_gone(traced: Traced) -> None:
    closed = f"127.0.0.1:{free_port()}"
    listed = await cli("runs", "list", "--json", "--address", closed, home=traced.home)
    assert listed.returncode == 0, listed.stderr
    assert f"cannot reach the Temporal server at {closed}" in listed.stderr
    assert "showing runs from the trace store" in listed.stderr
    runs = json.loads(listed.stdout)
    assert sorted(r["run_id"] for r in runs) == sorted(traced.runs["1"] + traced.runs["2"])
    assert {r["status"] for r in runs} == {"completed"}
    shown = await cli("runs", "list", "--spec", "retrying", "--address", closed, home=traced.home)
    assert shown.returncode == 0 and traced.runs["2"][0] in shown.stdout


async def test_export_traces_writes_sft_rows_with_the_messages_each_attempt_was_sent(
    traced: Traced, tmp_path: Path
) -> None:
    out = tmp_path / "sft.jsonl"
    result = await cli(
        "export-traces", "--spec", "retrying", "--stage", "outline", "--format", "sft",
        "-o", str(out), "--json", home=traced.home,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 3  # one valid (frontier) outline per run
    for row in rows:
        assert set(row) == {"messages", "output"}
        assert [m["role"] for m in row["messages"]] == ["system", "user"]
        assert "rejected" in row["messages"][1]["content"]  # the retry feedback it was sent
        assert json.loads(row["output"])["points"]
    assert "wrote 3 SFT rows" in result.stderr and "6 not from a successful stage" in result.stderr
    stats = json.loads(result.stdout)
    assert (stats["rows"], stats["attempts"], stats["not_successful"]) == (3, 9, 6)

    pairs = tmp_path / "dpo.jsonl"
    dpo = await cli(
        "export-traces", "--spec", "retrying", "--format", "dpo", "-o", str(pairs),
        home=traced.home,
    )  # fmt: skip
    assert dpo.returncode == 0, dpo.stderr
    assert "DPO pairs" in dpo.stderr and pairs.exists()
    bad = await cli(
        "export-traces", "--spec", "retrying", "--format", "dpo", "--min-score", "0.5",
        "-o", str(pairs), home=traced.home,
    )  # fmt: skip
    assert bad.returncode == 2 and "--min-score applies to --format sft only" in bad.stderr
    no_stage = await cli(
        "export-traces", "--spec", "retrying", "--stage", "outlne", "--format", "sft",
        "-o", str(out), home=traced.home,
    )  # fmt: skip
    assert no_stage.returncode == 2 and "did you mean 'outline'" in no_stage.stderr
