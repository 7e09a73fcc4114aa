"""Stale lessons retire, on a real Temporal dev server and a real SQLite store: a learning round
retires a promoted lesson whose stage left the spec (or is no LLM stage any more), and
re-verifies promoted lessons last verified longer than ``experience.reverify_after_days`` ago —
the one whose pitfall the spec no longer declares is retired with its figures, the one whose
pitfall is still there stays promoted with a re-verification event."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import update
from temporalio.client import Client

from armature_temporal.commands.learn import render_learn
from armature_temporal.experience import Heuristic, heuristic_id
from armature_temporal.experience.learning import LearnResult
from armature_temporal.store import TraceStore
from armature_temporal.store._base import table_of
from armature_temporal.store.engine import database_url
from armature_temporal.store.schema import HeuristicEventRow
from tests.fakes import assert_replays, plan_from, run_armature, start
from tests.workflows.test_learning import HEDGE, SPEC, TOPIC
from worker import build_worker

WANDERING = """\
        - id: wandering
          penalty: 0.3
          rate: 0.8
          symptom: As an aside, the weather was lovely.
          lesson: Stay on the topic that was asked about.
"""
RUNS = 8


def _promote(store: TraceStore, stage: str | None, text: str) -> str:
    """A person's lesson, promoted by them (as `armature memory add` then `promote`)."""
    now = datetime.now(UTC).isoformat()
    h = Heuristic(
        id=heuristic_id("pitfalls", stage, text),
        spec_name="pitfalls",
        stage_id=stage,
        kind="procedural",
        text=text,
        status="quarantined",
        source="person",
        provenance=[],
        created_at=now,
        updated_at=now,
    )
    store.add_heuristic(h, by="person:test", reason="added by hand")
    store.set_heuristic_status(h.id, "promoted", by="person:test", reason="I know it helps")
    return h.id


def _age(store: TraceStore, hid: str, days: int) -> None:
    """Move every event of ``hid`` ``days`` into the past (its last verification too)."""
    table = table_of(HeuristicEventRow)
    at = (datetime.now(UTC) - timedelta(days=days)).isoformat()
    with store.engine.begin() as conn:
        conn.execute(update(table).where(table.c.heuristic_id == hid).values(at=at))


async def _learn(client: Client, task_queue: str, path: Path, *extra: str) -> LearnResult:
    done = await run_armature(
        "learn",
        str(path),
        "--json",
        *extra,
        "--address",
        str(client.service_client.config.target_host),
        "--task-queue",
        task_queue,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    as_json = json.loads(done.stdout)
    as_json.pop("learn_id")
    return LearnResult.model_validate(as_json)


async def test_a_lesson_whose_pitfall_is_gone_retires_and_one_still_needed_stays(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    assert WANDERING in SPEC
    store = TraceStore(database_url())
    hedge, topic = _promote(store, "write", HEDGE), _promote(store, "write", TOPIC)
    fresh = _promote(store, None, "Answer in English.")
    async with build_worker(client, task_queue):
        for i in range(RUNS):
            handle = await start(
                client, plan_from(SPEC), task_queue, {"topic": f"t {i}"}, run_id=f"stale-{i}"
            )
            await handle.result()
        # Both pitfall lessons were last verified 40 days ago (default: re-verify after 30);
        # the spec-wide one today. Then the writer stops wandering: its pitfall goes.
        _age(store, hedge, 40)
        _age(store, topic, 40)
        fresh_events = store.heuristic_events(fresh)
        path = tmp_path / "pitfalls.yaml"
        path.write_text(SPEC.replace(WANDERING, ""))
        result = await _learn(client, task_queue, path)
        # Re-verification is off with reverify_after_days: 0: the next round tests nothing.
        off = tmp_path / "off.yaml"
        off.write_text(
            SPEC.replace("experience:\n", "experience:\n  reverify_after_days: 0\n").replace(
                WANDERING, ""
            )
        )
        _age(store, hedge, 40)
        quiet = await _learn(client, task_queue, off)

    assert result.status == "learned", result.detail
    # (The round may also test a lesson it distilled: the simulated distiller sometimes states
    # a useless one.)
    decided = {d.heuristic_id: d for d in result.decisions if d.figures.get("reverify")}
    assert set(decided) == {hedge, topic}  # the fresh one is not due
    assert decided[hedge].verdict == "reverified" and decided[topic].verdict == "retired"
    assert store.heuristic(hedge).status == "promoted"  # type: ignore[union-attr]
    assert store.heuristic(topic).status == "retired"  # type: ignore[union-attr]
    assert store.heuristic(fresh).status == "promoted"  # type: ignore[union-attr]
    assert store.heuristic_events(fresh) == fresh_events
    kept = store.heuristic_events(hedge)[-1]
    assert (kept.from_status, kept.to_status, kept.by) == ("promoted", "promoted", "memory-ci")
    assert kept.figures["reverify"] is True and kept.figures["adj_ci_low"] > 0
    assert kept.figures["n"] == 10 and kept.figures["m"] == len(result.decisions) >= 2
    gone = store.heuristic_events(topic)[-1]
    assert (gone.from_status, gone.to_status, gone.by) == ("promoted", "retired", "memory-ci")
    assert "no longer shown to help" in gone.reason
    # Common random numbers: without the pitfall the lesson changes nothing at all.
    assert gone.figures["delta"] == 0 and gone.figures["adj_ci_low"] <= 0
    # The baseline (without the lesson) and the candidate (the promoted set) are recorded.
    assert all("/without-" in r for r in gone.figures["baseline_runs"])
    assert all(
        r.endswith(tuple(f"/baseline/{i}" for i in range(10)))
        for r in gone.figures["candidate_runs"]
    )
    lines = "\n".join(render_learn(result))
    assert f"{hedge}  reverified" in lines and f"{topic}  retired" in lines
    assert "1 of 2 promoted re-verified, 1 retired" in result.detail
    assert not [d for d in quiet.decisions if d.figures.get("reverify")]
    assert store.heuristic_events(hedge)[-1].figures == kept.figures  # no new event
    # The round (with its patch marker) replays deterministically.
    rounds = [w async for w in client.list_workflows("WorkflowId STARTS_WITH 'learn-pitfalls'")]
    await assert_replays(client, *(w.id for w in rounds))


async def test_a_lesson_whose_stage_left_the_spec_is_retired_by_the_round(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    store = TraceStore(database_url())
    gone = _promote(store, "draft", "Draft before writing.")
    gated = _promote(store, "approve", "Approve only short answers.")
    kept, everywhere = _promote(store, "write", HEDGE), _promote(store, None, "Be brief.")
    # `draft` is not in the spec; `approve` is a gate stage now, no LLM stage.
    path = tmp_path / "pitfalls.yaml"
    path.write_text(
        SPEC + "  - id: approve\n    depends_on: [write]\n    gate: {type: human, message: ok?}\n"
    )
    async with build_worker(client, task_queue):
        done = await run_armature(
            "learn",
            str(path),
            "--address",
            str(client.service_client.config.target_host),
            "--task-queue",
            task_queue,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr
    for hid, stage in ((gone, "draft"), (gated, "approve")):
        assert store.heuristic(hid).status == "retired"  # type: ignore[union-attr]
        event = store.heuristic_events(hid)[-1]
        assert (event.from_status, event.to_status, event.by) == ("promoted", "retired", "learn")
        assert event.figures["stage_id"] == stage and stage in event.reason
        assert f"{hid} [{stage}]  retired (stage gone)" in done.stdout
    assert "no stage 'draft'" in done.stdout and "is a gate stage now" in done.stdout
    assert "2 retired (stage gone)" in done.stdout
    for hid in (kept, everywhere):
        assert store.heuristic(hid).status == "promoted"  # type: ignore[union-attr]
