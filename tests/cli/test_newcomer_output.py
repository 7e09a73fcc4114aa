"""What a newcomer reads (issue 13): export-traces' output, report and `submit --wait` tables,
`runs list`, progress lines, `bandit history`, dashboards that skip verification runs, and
JSON errors under --json. The console script in a subprocess; the runs are real, on a real
Temporal dev server with an in-process worker."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.traces import TraceChain
from armature_temporal.store import TraceStore
from tests.fakes import run_armature
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")


def address_of(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


async def cli(
    *args: str, home: Path, extra: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    # An empty ARMATURE_DB_URL falls back to SQLite under this ARMATURE_HOME; 80 columns, as
    # rich assumes when stdout is a pipe.
    env = {"ARMATURE_HOME": str(home), "ARMATURE_DB_URL": "", "COLUMNS": "80", **(extra or {})}
    result: subprocess.CompletedProcess[str] = await run_armature(*args, env=env, timeout=timeout)
    return result


class FanOut:
    """One finished run of specs/research-fanout.yaml, started with `submit --wait`."""

    def __init__(self, home: Path, address: str, submitted: subprocess.CompletedProcess[str]):
        self.home = home
        self.address = address
        self.submitted = submitted
        found = re.search(r"started run (\S+)", submitted.stderr)
        assert found, submitted.stderr
        self.run_id = found.group(1)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def fanout(
    temporal_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[FanOut]:
    home = tmp_path_factory.mktemp("fanout-home")
    queue = "tq-newcomer-output"
    address = address_of(temporal_env)
    # The in-process worker writes traces under this ARMATURE_HOME.
    with environ("ARMATURE_HOME", str(home)):
        async with build_worker(temporal_env.client, queue):
            submitted = await cli(
                "submit", "specs/research-fanout.yaml", "--wait", "--address", address,
                "--task-queue", queue, home=home,
            )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    yield FanOut(home, address, submitted)


@contextmanager
def environ(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` while the block runs, for an in-process worker."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def words(text: str) -> str:
    """``text`` without table borders, on one line: what a reader reads across wrapped cells."""
    return " ".join(text.replace("│", " ").replace("┃", " ").split())


# --- 2: export-traces writes into what is there, or to stdout ------------------------------


async def test_export_traces_writes_into_a_pipe_without_replacing_it(
    fanout: FanOut, tmp_path: Path
) -> None:
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(
        target=lambda: got.append(fifo.read_text(encoding="utf-8")), daemon=True
    )
    reader.start()
    done = await cli(
        "export-traces", "--spec", "research-fanout", "--format", "sft", "-o", str(fifo),
        home=fanout.home,
    )  # fmt: skip
    reader.join(timeout=30)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(fifo.stat().st_mode), "the pipe was replaced by a regular file"
    assert not (tmp_path / "rows.fifo.tmp").exists()
    rows = [json.loads(line) for line in got[0].splitlines()]
    assert rows and all(set(row) == {"messages", "output"} for row in rows)


async def test_export_traces_without_output_or_with_dash_writes_rows_to_stdout(
    fanout: FanOut,
) -> None:
    for extra in ([], ["-o", "-"]):
        done = await cli(
            "export-traces", "--spec", "research-fanout", "--format", "sft", *extra,
            home=fanout.home,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        assert rows and "wrote" in done.stderr
    assert not (Path.cwd() / "-").exists()


async def test_export_traces_failure_names_the_users_path_not_a_temporary_one(
    fanout: FanOut, tmp_path: Path
) -> None:
    target = tmp_path / "no-such-folder" / "rows.jsonl"
    done = await cli(
        "export-traces", "--spec", "research-fanout", "--format", "sft", "-o", str(target),
        home=fanout.home,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"cannot write {target}" in done.stderr and ".tmp" not in done.stderr


# --- 4, 14: report on a fan-out run ---------------------------------------------------------


async def test_report_of_a_finished_fanout_run_has_no_stage_left_running(fanout: FanOut) -> None:
    shown = await cli("report", fanout.run_id, "--json", home=fanout.home)
    assert shown.returncode == 0, shown.stderr
    stages = {s["stage_id"]: s for s in json.loads(shown.stdout)["stages"]}
    assert list(stages) == ["plan_research", "research", "recommend"]
    assert {s["status"] for s in stages.values()} == {"completed"}
    # The consensus judge's call is the fan-out stage's, under its own id.
    assert [a["stage_id"] for a in stages["research"]["attempt_records"]] == ["research__consensus"]
    text = await cli("report", fanout.run_id, home=fanout.home)
    assert text.returncode == 0, text.stderr
    assert "running" not in text.stdout


async def test_runs_show_and_report_show_the_inputs_and_a_childs_spec(fanout: FanOut) -> None:
    """runs show and report --json did not show a run's inputs; runs show on a fan-out child
    said `spec None`; a fan-out stage's attempts column showed its child count."""
    question = "Should we adopt durable execution for our agents?"
    shown = await cli("runs", "show", fanout.run_id, "--json", "--address", fanout.address,
                      home=fanout.home)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["inputs"]["question"] == question
    report = json.loads((await cli("report", fanout.run_id, "--json", home=fanout.home)).stdout)
    assert report["inputs"]["question"] == question
    reported = words((await cli("report", fanout.run_id, home=fanout.home)).stdout)
    assert question in reported and "(4 children)" in reported
    text = await cli("runs", "show", fanout.run_id, "--address", fanout.address, home=fanout.home)
    assert f'inputs: {{"question": "{question}"' in words(text.stdout)
    row = next(line for line in text.stdout.splitlines() if line.lstrip().startswith("research "))
    assert "(4 children)" in words(text.stdout)
    assert not re.search(r"research\s+│?\s*completed\s+│?\s*\S*\s+│?\s*4\b", row), row
    child = f"{fanout.run_id}/research/0"
    kid = await cli("runs", "show", child, "--address", fanout.address, home=fanout.home)
    assert kid.returncode == 0, kid.stderr
    assert "spec researcher" in kid.stdout and "spec None" not in kid.stdout
    assert f"child of {fanout.run_id}" in words(kid.stdout)


async def test_report_piped_at_80_columns_keeps_values_whole_and_full_shows_outputs(
    fanout: FanOut,
) -> None:
    shown = await cli("report", fanout.run_id, home=fanout.home)
    assert shown.returncode == 0, shown.stderr
    # One-line values are never folded into pieces, nor cut to an ellipsis.
    for value in ("research__consensus", "plan_research", "completed", "frontier", "simulate"):
        assert re.search(rf"(^|[\s│]){value}([\s│]|$)", shown.stdout, re.M), value
    report = json.loads((await cli("report", fanout.run_id, "--json", home=fanout.home)).stdout)
    recommend = next(s for s in report["stages"] if s["stage_id"] == "recommend")
    content = recommend["output"]["content"]
    assert len(content) > 80
    full = await cli("report", fanout.run_id, "--full", home=fanout.home)
    assert full.returncode == 0, full.stderr
    assert content in words(full.stdout)


async def test_dashboard_piped_at_80_columns_keeps_values_whole(fanout: FanOut) -> None:
    board = await cli("dashboard", "research-fanout", home=fanout.home)
    overview = await cli("dashboard", home=fanout.home)
    assert board.returncode == 0 and overview.returncode == 0, board.stderr + overview.stderr
    for value in ("research__consensus", "Consensus judge", "frontier", "simulate", "$0.0000"):
        assert value in board.stdout, value
    assert "…" not in board.stdout.replace("0 ▁ … █ 1", "")
    assert "research-fanout" in overview.stdout and "…" not in overview.stdout


# --- 14, 16: submit --wait ------------------------------------------------------------------


async def test_submit_wait_prints_each_output_whole_and_plain_progress_lines(
    fanout: FanOut,
) -> None:
    progress = fanout.submitted.stderr
    assert "tier None" not in progress and "attempt 4" not in progress
    assert "research: completed (4 children)" in progress
    shown = await cli(
        "runs", "show", fanout.run_id, "--json", "--address", fanout.address, home=fanout.home
    )
    outputs = json.loads(shown.stdout)["outputs"]
    content = outputs["recommend"]["content"]
    assert len(content) > 80
    assert content in words(fanout.submitted.stdout)


# --- 15: runs list --------------------------------------------------------------------------


async def test_runs_list_hides_fanout_children_unless_all_and_names_their_spec(
    fanout: FanOut,
) -> None:
    common = ["--address", fanout.address, "--json"]
    listed = json.loads((await cli("runs", "list", *common, home=fanout.home)).stdout)
    ids = [r["run_id"] for r in listed]
    assert fanout.run_id in ids
    assert not [i for i in ids if i.startswith(fanout.run_id + "/")]
    everything = json.loads((await cli("runs", "list", "--all", *common, home=fanout.home)).stdout)
    children = [r for r in everything if r["run_id"].startswith(fanout.run_id + "/")]
    assert len(children) == 4
    assert {r["spec_name"] for r in children} == {"researcher"}
    alone = await cli("runs", home=fanout.home, extra={"TEMPORAL_ADDRESS": fanout.address})
    assert alone.returncode == 0, alone.stderr
    assert fanout.run_id in alone.stdout and "/research/" not in alone.stdout


async def test_runs_list_from_the_store_hides_children_too(fanout: FanOut) -> None:
    from tests.fakes import free_port

    listed = await cli(
        "runs", "list", "--json", "--address", f"127.0.0.1:{free_port()}", home=fanout.home
    )
    assert listed.returncode == 0, listed.stderr
    assert [r["run_id"] for r in json.loads(listed.stdout)] == [fanout.run_id]


# --- 5: bandit history ----------------------------------------------------------------------


async def test_bandit_history_prints_each_snapshot(
    armature_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from activities.bandit import runtime_for

    monkeypatch.setenv("ARMATURE_DB_URL", "")
    bandit = runtime_for(
        "demo:pick",
        [{"arm_id": "warm", "params": {"temperature": 0.9}}, {"arm_id": "cool", "params": {}}],
    )
    for _ in range(6):
        chosen = bandit.select()
        bandit.update(chosen.decision_id, 1.0 if chosen.arm_id == "warm" else 0.0)
    bandit.maintenance()
    shown = await cli("bandit", "history", "demo:pick", home=armature_home)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 2
    assert {line.split()[1] for line in lines} == {"warm", "cool"}
    assert all(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d ", line) for line in lines)


# --- 6: dashboards count production runs ----------------------------------------------------


def _run(run_id: str, minute: int, *, verification: bool = False) -> list[Any]:
    chain = TraceChain(run_id, "triage", "a" * 64, "policy-1")
    at = f"2026-01-01T09:{minute:02d}:00+00:00"
    data = {
        "spec_version": "1",
        "inputs": {},
        "parent_run_id": "improve-1" if verification else None,
    }
    chain.add("run_start", at, data={**data, "verification": verification})
    chain.add("run_end", at, status="completed", latency_ms=1000.0)
    return chain.take()


async def test_dashboard_limit_counts_production_runs_not_verification_runs(
    armature_home: Path,
) -> None:
    store = TraceStore(f"sqlite:///{armature_home / 'armature.db'}")
    try:
        for i in range(3):
            store.write(_run(f"prod-{i}", i))
        for i in range(5):  # an improvement round, after them
            store.write(_run(f"improve-1/candidate/{i}", 10 + i, verification=True))
    finally:
        store.close()
    board = await cli("dashboard", "triage", "--limit", "2", "--json", home=armature_home)
    assert board.returncode == 0, board.stderr
    assert json.loads(board.stdout)["runs"] == 2


# --- 17: --json errors on stdout ------------------------------------------------------------


async def test_json_errors_go_to_stdout_as_json(
    armature_home: Path, tmp_path: Path, temporal_env: WorkflowEnvironment
) -> None:
    bad_spec = tmp_path / "bad.yaml"
    bad_spec.write_text("name: bad\nstages: 3\n", encoding="utf-8")
    address = ["--address", address_of(temporal_env)]
    cases = [
        ("plan", str(bad_spec), "--json"),
        ("submit", "specs/quickstart.yaml", "--inputs", str(tmp_path / "missing.json"), "--json"),
        ("report", "no-such-run", "--json"),
        ("runs", "show", "no-such-run", "--json", *address),
        ("dashboard", "no-such-spec", "--json"),
        ("dashboard", "no-such-spec", "--format", "json"),
        ("export-traces", "--spec", "no-such-spec", "--format", "sft", "-o", "x.jsonl", "--json"),
    ]
    for args in cases:
        done = await cli(*args, home=armature_home)
        assert done.returncode == 2, (args, done.stderr)
        answer = json.loads(done.stdout)
        assert answer["code"] == 2 and answer["error"], args
        assert answer["error"][:40] in done.stderr, args


# --- 13: gates show the whole message -------------------------------------------------------


async def test_gates_shows_the_whole_message_with_a_tool_calls_arguments(
    temporal_env: WorkflowEnvironment, armature_home: Path, tmp_path: Path
) -> None:
    import asyncio

    from armature_temporal.service.client import decide_gate, prepare_inputs, start_run
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec

    queue = "tq-newcomer-gates"
    address = address_of(temporal_env)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    plan = compile_spec(load_spec(Path("specs/safe-shell.yaml")))
    with environ("ARMATURE_WORKSPACE", str(workspace)):
        async with build_worker(temporal_env.client, queue):
            handle = await start_run(
                temporal_env.client,
                plan,
                prepare_inputs(plan, {"note": "n" * 120}),
                task_queue=queue,
            )
            listed: list[Any] = []
            for _ in range(60):
                answer = await cli("gates", "--json", "--address", address, home=armature_home)
                listed = [g for g in json.loads(answer.stdout) if g["run_id"] == handle.id]
                if listed and listed[0]["gates"]:
                    break
                await asyncio.sleep(0.1)
            message = listed[0]["gates"][0]["message"]
            shown = await cli("gates", "--address", address, home=armature_home)
            await decide_gate(temporal_env.client, handle.id, "archive", "reject", comment="test")
    assert shown.returncode == 0, shown.stderr
    assert len(message) > 60 and '"argv": ["tar", "-czf", "notes.tgz", "notes"]' in message
    assert message in words(shown.stdout)
    assert f"armature approve {handle.id} archive" in shown.stdout
