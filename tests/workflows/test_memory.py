"""Cross-run memory (``memory:``) on a real Temporal dev server and trace store: captured
outputs come back in later runs of the same spec as ``{stage: {key: [newest, ..., oldest]}}``
(rolling ``max_entries``), ``fresh`` starts empty, specs never share memory unless one names
the other's, and a store outage never stops a run. The interpreter's ``Memory`` runs here
through the harness, which injects it as ``inject_as`` like the interpreter."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from temporalio.client import Client

from activities.memory import capture_memory, load_memory
from armature_temporal.runtime.models import RunResult
from armature_temporal.store import TraceStore
from tests.fakes import fake_capture_memory_down, fake_load_memory_down, plan_from
from tests.workflows.collaborators_harness import harness_worker, start_harness
from worker import ACTIVITIES

pytestmark = pytest.mark.asyncio(loop_scope="session")


def spec(name: str, memory: str) -> str:
    """Stage ``pick`` (its output given by the test) is captured; ``recall`` shows what the
    run's template variable ``_memory`` (or ``inject_as``) held."""
    return f"""\
name: {name}
memory:
{memory}
adapters:
  show:
    type: python
    fn: tests.fakes:fake_adapter_seen
    args: {{seen: "{{{{ _memory }}}}"}}
stages:
  - id: pick
    role: {{name: Picker, description: "Pick one."}}
    output_mode: json
  - id: recall
    adapter: show
    depends_on: [pick]
"""


WINDOW = """\
  capture:
    - {stage: pick, key: choice, max_entries: 2}
    - {stage: pick, key: score}
"""


async def runs(
    client: Client,
    task_queue: str,
    text: str,
    picks: list[dict[str, Any]],
    activities: list[Any] | None = None,
) -> list[RunResult]:
    """One run per pick, one after another; each run's ``pick`` outputs the pick."""
    plan = plan_from(text)
    results = []
    async with harness_worker(client, task_queue, activities):
        for pick in picks:
            handle = await start_harness(client, task_queue, plan, given={"pick": pick})
            results.append(await asyncio.wait_for(handle.result(), timeout=60))
    return results


def seen(result: RunResult) -> Any:
    assert result.state == "completed", result.stages
    return result.outputs["recall"]["seen"]


async def test_captured_values_come_back_newest_first_in_a_rolling_window(
    client: Client, task_queue: str
) -> None:
    picks = [{"choice": f"c{n}", "score": n} for n in range(1, 5)]
    done = await runs(client, task_queue, spec("memo", WINDOW), picks)
    assert seen(done[0]) == {}  # the first run remembers nothing
    assert seen(done[1]) == {"pick": {"choice": ["c1"], "score": [1]}}
    # max_entries 2 for choice (the oldest goes first); score keeps the default 5.
    assert seen(done[3]) == {"pick": {"choice": ["c3", "c2"], "score": [3, 2, 1]}}
    # Provenance: every kept value names its run, stage and time.
    kept = TraceStore().memory("memo")
    assert [(e.stage, e.key, e.value) for e in kept if e.key == "choice"] == [
        ("pick", "choice", "c3"),
        ("pick", "choice", "c4"),
    ]
    assert {e.run_id for e in kept if e.key == "choice"} == {done[2].run_id, done[3].run_id}
    times = [datetime.fromisoformat(e.recorded_at) for e in kept if e.key == "choice"]
    assert times == sorted(times) and all(t.tzinfo is not None for t in times)
    # The trace says what was loaded and captured.
    records = [r for r in TraceStore().records(done[3].run_id) if r.kind == "memory"]
    loaded, captured = records
    assert loaded.status == "loaded"
    assert loaded.data["entries"] == {"pick.choice": 2, "pick.score": 3}
    assert set(loaded.data["runs"]) == {r.run_id for r in done[:3]}
    assert captured.status == "captured" and captured.stage_id == "pick"
    assert captured.data["keys"] == ["choice", "score"]


async def test_a_missing_or_null_key_is_not_captured(client: Client, task_queue: str) -> None:
    done = await runs(
        client,
        task_queue,
        spec("memo-gaps", WINDOW),
        [{"choice": None, "score": 7}, {"other": 1}, {"choice": "x"}],
    )
    assert seen(done[2]) == {"pick": {"score": [7]}}
    assert [r.kind for r in TraceStore().records(done[1].run_id)].count("memory") == 1  # load


async def test_fresh_runs_start_empty_but_still_capture(client: Client, task_queue: str) -> None:
    fresh = WINDOW + "  fresh: true\n"
    await runs(client, task_queue, spec("memo-fresh", fresh), [{"choice": "a"}, {"choice": "b"}])
    plain = await runs(client, task_queue, spec("memo-fresh", WINDOW), [{"choice": "c"}])
    done = await runs(client, task_queue, spec("memo-fresh", fresh), [{"choice": "d"}])
    assert seen(done[0]) == {}
    assert seen(plain[0]) == {"pick": {"choice": ["b", "a"]}}
    loaded = next(r for r in TraceStore().records(done[0].run_id) if r.kind == "memory")
    assert loaded.status == "fresh"


async def test_specs_keep_their_own_memory_unless_one_names_the_others(
    client: Client, task_queue: str
) -> None:
    await runs(client, task_queue, spec("memo-a", WINDOW), [{"choice": "from-a"}])
    other = await runs(client, task_queue, spec("memo-b", WINDOW), [{"choice": "from-b"}] * 2)
    shared = spec("memo-c", WINDOW + "  workflow_name: memo-a\n  inject_as: past\n").replace(
        "_memory", "past"
    )
    sharing = await runs(client, task_queue, shared, [{"choice": "from-c"}])
    assert seen(other[1]) == {"pick": {"choice": ["from-b"]}}
    assert seen(sharing[0]) == {"pick": {"choice": ["from-a"]}}
    assert [e.value for e in TraceStore().memory("memo-a") if e.key == "choice"] == [
        "from-a",
        "from-c",
    ]


async def test_a_verification_run_remembers_nothing(client: Client, task_queue: str) -> None:
    plan = plan_from(spec("memo-verify", WINDOW))
    async with harness_worker(client, task_queue):
        handle = await start_harness(
            client, task_queue, plan, given={"pick": {"choice": "replayed"}}, verification=True
        )
        result: RunResult = await asyncio.wait_for(handle.result(), timeout=60)
    assert result.stages["pick"].status == "completed"  # (the adapter is not run: verification)
    assert TraceStore().memory("memo-verify") == []
    records = TraceStore().records(result.run_id)
    assert [r.status for r in records if r.kind == "memory"] == ["loaded"]  # no capture


async def test_a_store_outage_leaves_the_run_going_and_the_trace_says_so(
    client: Client, task_queue: str
) -> None:
    down = [
        fake_load_memory_down,
        fake_capture_memory_down,
        *(a for a in ACTIVITIES if a not in (load_memory, capture_memory)),
    ]
    done = await runs(client, task_queue, spec("memo-down", WINDOW), [{"choice": "x"}], down)
    assert seen(done[0]) == {}
    assert done[0].outputs["pick"] == {"choice": "x"}
    load, capture = [r for r in TraceStore().records(done[0].run_id) if r.kind == "memory"]
    assert load.status == "failed" and "not loaded, the run goes on" in (load.error or "")
    assert "simulated outage" in (load.error or "")
    assert capture.status == "failed" and capture.stage_id == "pick"
    assert "['choice'] not remembered" in (capture.error or "")
    assert TraceStore().memory("memo-down") == []
