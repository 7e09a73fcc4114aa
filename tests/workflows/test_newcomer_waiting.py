"""What a newcomer sees while a run waits and when it ends (issue 13, points 10, 11, 12, 18).

- A run waiting for a person says so on its Web UI page (current details), with the command
  that answers it; its gate and backoff timers are named.
- A ``gate`` signal the run refuses (unknown stage, decision "maybe", not a decision at all)
  is kept with the reason: the status query and ``armature runs show`` list it, and the
  workflow task never fails over it.
- Run outcomes have one vocabulary: a rejected run is a failed workflow (type RunRejected) so
  the Web UI does not list it as completed; ``cancelled`` is spelt one way; ``runs show`` on a
  cancelled run lists its stages; a second ``cancel`` says the run had already ended.
- The README's CLI reference writes boolean pairs as they are typed (``--wait/--no-wait``), and
  its ``temporal workflow signal`` example says how to reach a dev server on another port;
  hints to install an extra match how Armature was installed (``pip install -e '.[serve]'``
  from a clone).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.models import RunStatus
from armature_temporal.service.client import (
    cancel_run,
    decide_gate,
    list_runs,
    run_outcome,
    show_run,
)
from armature_temporal.spec.compiler import load_plan
from tests.fakes import SPECS, assert_replays, plan_from, run_armature, start, wait_for_gate
from worker import build_worker

session_loop = pytest.mark.asyncio(loop_scope="session")

README = SPECS.parent / "README.md"

GATE_SPEC = """\
name: newcomer-gate
model_tiers: {small: {provider: simulate}}
stages:
  - id: draft
    role: {name: D, description: "draft a reply"}
  - id: approve_reply
    depends_on: [draft]
    gate: {type: human, message: "Send this reply?", timeout: 1h, on_timeout: reject}
  - {id: after, depends_on: [approve_reply], role: {name: A, description: "send it"}}
"""

BACKOFF_SPEC = """\
name: newcomer-backoff
model_tiers:
  bad: {provider: simulate, valid_rate: 0.0}
stages:
  - id: strict
    role: {name: S, description: "give n", model_tier: bad}
    output_mode: json
    output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    on_fail: {loop: {max: 2, backoff_s: 1}}
"""


def address_of(env: WorkflowEnvironment) -> str:
    return str(env.client.service_client.config.target_host)


async def timer_summaries(handle: Any) -> list[str]:
    """The summaries of the run's TimerStarted events, as the Web UI shows them."""
    history = await handle.fetch_history()
    found = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            found.append(json.loads(event.user_metadata.summary.data or b'""'))
    return found


async def current_details(handle: Any) -> str:
    meta = await handle.query("__temporal_workflow_metadata", result_type=WorkflowMetadata)
    return str(meta.current_details)


# --- point 10: the Web UI says a run waits for a person, and names its timers -------------------


@session_loop
async def test_waiting_run_shows_what_it_waits_for_and_how_to_answer(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(GATE_SPEC)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
        details = await current_details(handle)
        assert (
            f"waiting for approval at approve_reply: Send this reply? — "
            f"`armature approve {handle.id} approve_reply`"
        ) in details
        assert f"`armature reject {handle.id} approve_reply --reason ...`" in details
        summaries = await timer_summaries(handle)
        assert (
            "waiting for approval at approve_reply: if nobody decides within 1h, on_timeout reject"
        ) in summaries
        assert not any(s == "gate approve_reply timeout" for s in summaries)
        await decide_gate(client, handle.id, "approve_reply", "approve")
        await handle.result()
        assert await current_details(handle) == ""  # nobody is asked any more
    await assert_replays(client, handle.id)


@session_loop
async def test_backoff_timers_say_whose_retry_they_wait_for(
    client: Client, task_queue: str
) -> None:
    plan = plan_from(BACKOFF_SPEC)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        assert (await run_outcome(handle)) is not None
    summaries = await timer_summaries(handle)
    assert summaries == [
        "strict: retry backoff 1s before attempt 2 (tier bad)",
        "strict: retry backoff 2s before attempt 3 (tier bad)",
    ]


# --- point 11: refused signals are kept with the reason ------------------------------------------


@session_loop
async def test_refused_gate_signals_are_listed_with_the_reason(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    plan = plan_from(GATE_SPEC)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
        await handle.signal("gate", {"stage": "aprove_reply", "decision": "approve"})
        await handle.signal("gate", {"stage": "approve_reply", "decision": "maybe"})
        await handle.signal("gate", "approve")
        status: RunStatus | None = None
        for _ in range(100):
            status = await handle.query("status", result_type=RunStatus)
            if len(status.refused_signals) == 3:
                break
            await asyncio.sleep(0.05)
        assert status is not None and len(status.refused_signals) == 3, status
        unknown, maybe, garbage = status.refused_signals
        assert unknown.stage == "aprove_reply" and "unknown stage 'aprove_reply'" in unknown.reason
        assert "did you mean 'approve_reply'" in unknown.reason
        assert maybe.stage == "approve_reply" and "decision" in maybe.reason
        assert "'approve' or 'reject'" in maybe.reason and maybe.received["decision"] == "maybe"
        assert garbage.stage is None and "not a gate decision" in garbage.reason
        # The run still waits: none of them failed a workflow task or decided the gate.
        assert status.state == "waiting_gate"
        # The update path refuses the same bad decision to the caller, and writes nothing.
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(
                "resolve_gate", {"stage": "approve_reply", "decision": "maybe"}, result_type=str
            )
        assert (await handle.query("status", result_type=RunStatus)).state == "waiting_gate"
        shown = await run_armature("runs", "show", handle.id, "--address", address_of(temporal_env))
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())
        assert "refused gate signal" in text and "unknown stage 'aprove_reply'" in text
        as_json = await run_armature(
            "runs", "show", handle.id, "--json", "--address", address_of(temporal_env)
        )
        assert len(json.loads(as_json.stdout)["refused_signals"]) == 3
        await handle.signal("gate", {"stage": "approve_reply", "decision": "approve"})
        result = await handle.result()
    assert result.state == "completed" and len(result.refused_signals) == 3
    view = await show_run(client, handle.id)
    assert [r.stage for r in view.refused_signals] == ["aprove_reply", "approve_reply", None]
    await assert_replays(client, handle.id)


# --- point 12: one vocabulary of run outcomes ----------------------------------------------------


@session_loop
async def test_rejected_run_is_a_failed_workflow_with_a_typed_error(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
        await decide_gate(client, handle.id, "approve_reply", "reject", comment="wrong tone")
        with pytest.raises(WorkflowFailureError) as info:
            await handle.result()
    cause = info.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "RunRejected"
    assert "wrong tone" in cause.message
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    view = await show_run(client, handle.id)
    assert (view.status, view.state) == ("failed", "rejected")
    assert view.stages["approve_reply"].status == "rejected"
    assert view.stages["refine"].status == "completed"  # post_run stages still ran
    # runs list says rejected too: Temporal only knows "failed"; the trace store knows why.
    listed = await run_armature("runs", "list", "--json", "--address", address_of(temporal_env))
    assert listed.returncode == 0, listed.stderr
    (row,) = [r for r in json.loads(listed.stdout) if r["run_id"] == handle.id]
    assert row["status"] == "rejected"


@session_loop
async def test_cancel_reports_the_end_once_and_show_lists_the_stages(
    temporal_env: WorkflowEnvironment, client: Client, task_queue: str
) -> None:
    addr = address_of(temporal_env)
    plan = plan_from(GATE_SPEC)
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
        first = await run_armature("cancel", handle.id, "--address", addr)
        assert first.returncode == 0, first.stderr
        assert first.stdout.strip() == f"run {handle.id} cancelled"
        second = await run_armature("cancel", handle.id, "--address", addr)
        assert second.returncode == 0, second.stderr
        assert "had already ended (cancelled); nothing to cancel" in second.stdout
        assert (await cancel_run(client, handle.id)).already_ended
        view = await show_run(client, handle.id)
        shown = await run_armature("runs", "show", handle.id, "--address", addr)
    assert (view.status, view.state) == ("cancelled", "cancelled")
    assert view.stages["draft"].status == "completed"
    assert view.stages["approve_reply"].status == "cancelled"
    assert view.stages["after"].status in ("skipped", "pending")
    assert "approve_reply" in shown.stdout and "canceled" not in shown.stdout
    for _ in range(100):  # visibility is eventually consistent
        listed = {r.run_id: r.status for r in await list_runs(client, spec=plan.name, limit=50)}
        if listed.get(handle.id) == "cancelled":
            break
        await asyncio.sleep(0.1)
    assert listed[handle.id] == "cancelled"


# --- point 18: the README ------------------------------------------------------------------------


def test_cli_reference_writes_boolean_pairs_as_they_are_typed() -> None:
    from armature_temporal.spec.docgen import cli_reference

    reference = cli_reference()
    assert "- `--wait/--no-wait`: Wait for the round and print it." in reference
    readme = README.read_text(encoding="utf-8")
    assert "- `--wait/--no-wait`: Wait for the round and print it." in readme
    assert "- `--wait`: Wait for the round" not in readme


def test_readme_signal_example_names_the_address_of_a_moved_dev_server() -> None:
    readme = README.read_text(encoding="utf-8")
    start_at = readme.index("temporal workflow signal --workflow-id")
    example = readme[start_at - 400 : start_at + 800]
    assert "--address" in example and "ARMATURE_DEV_PORT" in example


class _FakeDist:
    """An installed distribution whose pip record (direct_url.json) is ``record``."""

    def __init__(self, record: dict[str, Any] | None) -> None:
        self.record = record

    def read_text(self, name: str) -> str | None:
        return json.dumps(self.record) if name == "direct_url.json" and self.record else None


def test_install_hints_match_how_armature_was_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from armature_temporal import extras

    clone = tmp_path / "armature"
    clone.mkdir()

    def installed(record: dict[str, Any] | None) -> None:
        monkeypatch.setattr(extras.metadata, "distributions", lambda name: [_FakeDist(record)])

    installed({"url": clone.as_uri(), "dir_info": {"editable": True}})
    assert extras.install_extra_hint("serve", cwd=clone) == "pip install -e '.[serve]'"
    assert extras.install_extra_hint("serve", cwd=tmp_path) == "pip install -e 'armature[serve]'"
    installed({"url": "https://files.example/armature_temporal-0.1.0.whl", "archive_info": {}})
    assert extras.install_extra_hint("finetune") == "pip install 'armature-temporal[finetune]'"
    # `armature serve` without FastAPI says how to add the extra to this (editable) install.
    installed({"url": clone.as_uri(), "dir_info": {"editable": True}})
    monkeypatch.chdir(clone)
    monkeypatch.setitem(sys.modules, "fastapi", None)
    from armature_temporal.service.webhooks import WebhookConfigError, create_app

    with pytest.raises(WebhookConfigError, match=re.escape("pip install -e '.[serve]'")):
        create_app({}, client=None, task_queue="q")  # type: ignore[arg-type]


@session_loop
async def test_a_decision_with_no_worker_to_take_it_fails_instead_of_waiting_forever(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from armature_temporal.service import client as client_module
    from armature_temporal.service.client import GateError

    plan = load_plan(SPECS / "customer-triage.yaml")
    async with build_worker(client, task_queue):
        handle = await start(client, plan, task_queue)
        await wait_for_gate(handle, "approve_reply")
    # The worker is gone: the update has nobody to take it.
    monkeypatch.setattr(client_module, "GATE_UPDATE_TIMEOUT_S", 2.0)
    with pytest.raises(GateError, match="no worker took the decision"):
        await decide_gate(client, handle.id, "approve_reply", "approve")
    await handle.terminate("test over")
