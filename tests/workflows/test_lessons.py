"""The heuristics memory in runs (``experience:``), on a real Temporal dev server and trace store:
promoted lessons go into the prompt's Lessons block and the attempt records' provenance, a
verification run given lesson ids carries exactly those (a real run only the promoted ones, a
judge's prompt none, none today's scan flags), each stage rewards its lessons once with its
evidence, a lesson that does not earn its place retires, and nothing happens with
experience off or (for rewards) in verification runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client

from activities.experience import _reward, load_lessons, reward_lessons
from armature_temporal.experience.compiler import LESSONS_HEADING
from armature_temporal.runtime.models import LessonsQuery, LessonsReward, RunInput, RunResult
from armature_temporal.runtime.traces import TraceRecord
from armature_temporal.spec.compiler import Plan
from armature_temporal.store import TraceStore
from tests.fakes import assert_replays, heuristic, plan_from
from tests.lesson_probes import PROBES
from worker import ACTIVITIES, build_worker
from workflows.run_spec import WORKFLOW_NAME

pytestmark = pytest.mark.asyncio(loop_scope="session")
NOW = "2026-12-01T00:00:00+00:00"


def spec(name: str, experience: str = "{embedding_model: lexical}", quality: float = 0.8) -> str:
    """``answer`` (judged by ``grade``) and ``other``, on simulate tiers."""
    return f"""\
name: {name}
model_tiers:
  small: {{provider: simulate, quality: {quality}}}
  big: {{provider: simulate, quality: 0.9}}
experience: {experience}
stages:
  - id: answer
    role: {{name: A, description: "Answer the question about units.", model_tier: small}}
  - id: other
    role: {{name: O, description: "Summarise the answer.", model_tier: small}}
    depends_on: [answer]
  - id: grade
    role: {{name: J, type: judge, description: "Grade the answer.", model_tier: big}}
    depends_on: [answer]
"""


def add(spec_name: str, text: str, stage: str | None = "answer", status: str = "promoted") -> str:
    h = heuristic(spec_name, text, status, stage, now=NOW)
    return TraceStore().add_heuristic(h, by="person:test", reason="test").id


async def run(
    client: Client,
    task_queue: str,
    plan: Plan,
    run_id: str,
    activities: list[Any] | None = None,
    **given: Any,
) -> RunResult:
    async with build_worker(client, task_queue, activities=activities):
        handle = await client.start_workflow(
            WORKFLOW_NAME,
            RunInput(plan=plan, **given),
            id=run_id,
            task_queue=task_queue,
            result_type=RunResult,
        )
        return await asyncio.wait_for(handle.result(), timeout=60)


def attempts(run_id: str, stage: str) -> list[TraceRecord]:
    return [r for r in TraceStore().records(run_id) if r.kind == "attempt" and r.stage_id == stage]


def system_of(record: TraceRecord) -> str:
    return str(record.data["messages"][0]["content"])


async def test_promoted_lessons_are_in_the_prompt_and_the_provenance(
    client: Client, task_queue: str
) -> None:
    name = "lessons-in"
    good = add(name, "Always state the units of every number.")
    wide = add(name, "Keep the answer under 100 words.", stage=None)
    held = add(name, "Quote the source of each figure.", status="quarantined")
    elsewhere = add(name, "Mention the weather.", stage="other")
    done = await run(client, task_queue, plan_from(spec(name)), "lessons-in-1")
    assert done.state == "completed", done.stages
    (answer,) = attempts(done.run_id, "answer")
    system = system_of(answer)
    block = system[system.index(LESSONS_HEADING) :]
    assert "- Always state the units of every number." in block
    assert "- Keep the answer under 100 words." in block
    assert "Quote the source" not in system and "weather" not in system
    lessons = {k: v for k, v in answer.inputs_provenance.items() if k.startswith("lesson:")}
    assert lessons == {f"lesson:{good}": "memory", f"lesson:{wide}": "memory"}
    (other,) = attempts(done.run_id, "other")
    assert f"lesson:{elsewhere}" in other.inputs_provenance
    assert f"lesson:{held}" not in other.inputs_provenance
    loaded = [
        r
        for r in TraceStore().records(done.run_id)
        if r.kind == "memory" and r.stage_id == "answer"
    ]
    assert loaded[0].status == "loaded" and set(loaded[0].data["ids"]) == {good, wide}
    assert loaded[0].data["embedder"] == "lexical"  # experience.embedding_model


async def test_top_k_and_the_token_budget_bound_the_block(client: Client, task_queue: str) -> None:
    name = "lessons-k"
    for n in range(5):
        add(name, f"Lesson number {n}: check the units.")
    plan = plan_from(spec(name, "{embedding_model: lexical, top_k: 2}"))
    done = await run(client, task_queue, plan, "lessons-k-1")
    (answer,) = attempts(done.run_id, "answer")
    assert system_of(answer).count("- Lesson number") == 2
    add(name, "x" * 2000)  # never fits 300 tokens
    plan = plan_from(spec(name, "{embedding_model: lexical, top_k: 10}"))
    done = await run(client, task_queue, plan, "lessons-k-2")
    (answer,) = attempts(done.run_id, "answer")
    assert system_of(answer).count("- Lesson number") == 5 and "x" * 100 not in system_of(answer)


async def test_given_lesson_ids_are_exactly_what_runs_carry(
    client: Client, task_queue: str
) -> None:
    name = "lessons-given"
    add(name, "Always state the units of every number.")
    held = add(name, "Quote the source of each figure.", status="quarantined")
    plan = plan_from(spec(name))
    # A verification run (memory CI's replay): the quarantined lesson under test is carried.
    done = await run(
        client, task_queue, plan, "lessons-given-1", lessons=[held, "h-nosuch"], verification=True
    )
    (answer,) = attempts(done.run_id, "answer")
    assert "- Quote the source of each figure." in system_of(answer)
    assert "units" not in system_of(answer)
    assert [k for k in answer.inputs_provenance if k.startswith("lesson:")] == [f"lesson:{held}"]
    loaded = next(
        r
        for r in TraceStore().records(done.run_id)
        if r.kind == "memory" and r.stage_id == "answer"
    )
    assert loaded.data["missing"] == ["h-nosuch"] and loaded.data["given"] is True
    done = await run(client, task_queue, plan, "lessons-given-2", lessons=[])
    assert LESSONS_HEADING not in system_of(attempts(done.run_id, "answer")[0])


def loaded(run_id: str, stage: str) -> dict[str, Any]:
    """The data of the stage's first ``memory`` record of loaded lessons."""
    found = [
        r
        for r in TraceStore().records(run_id)
        if r.kind == "memory" and r.stage_id == stage and r.status == "loaded"
    ]
    return dict(found[0].data)


# --- quarantine is not admission (issue #25, item 11) -------------------------------------


async def test_a_quarantined_lesson_enters_only_memory_ci_replays(
    client: Client, task_queue: str
) -> None:
    name = "gate-quarantine"
    held = add(name, "Quote the source of each figure.", status="quarantined")
    gone = add(name, "Mention the weather.", status="rejected")
    plan = plan_from(spec(name))
    done = await run(client, task_queue, plan, "gate-q-real", lessons=[held, gone])
    assert done.state == "completed", done.stages
    (answer,) = attempts(done.run_id, "answer")
    assert LESSONS_HEADING not in system_of(answer)
    assert not any(k.startswith("lesson:") for k in answer.inputs_provenance)
    data = loaded(done.run_id, "answer")
    assert data["ids"] == [] and {r.split(":")[0] for r in data["refused"]} == {held, gone}
    replay = await run(
        client, task_queue, plan, "gate-q-verify", lessons=[held, gone], verification=True
    )
    (answer,) = attempts(replay.run_id, "answer")
    assert "- Quote the source of each figure." in system_of(answer)
    assert "weather" not in system_of(answer)  # rejected: not even in a replay


async def test_no_lesson_enters_a_judge_prompt(client: Client, task_queue: str) -> None:
    name = "gate-judge"
    wide = add(name, "Keep the answer under 100 words.", stage=None)
    mine = add(name, "Be generous with partial answers.", stage="grade")
    plan = plan_from(spec(name))
    done = await run(client, task_queue, plan, "gate-judge-1")
    assert "- Keep the answer under 100 words." in system_of(attempts(done.run_id, "answer")[0])
    (grade,) = attempts(done.run_id, "grade")
    assert LESSONS_HEADING not in system_of(grade)
    assert not any(k.startswith("lesson:") for k in grade.inputs_provenance)
    # Given explicitly (as memory CI's replays give them), still not in the judge's prompt.
    replay = await run(
        client, task_queue, plan, "gate-judge-2", lessons=[wide, mine], verification=True
    )
    assert LESSONS_HEADING not in system_of(attempts(replay.run_id, "grade")[0])
    assert all("judge" in r for r in loaded(replay.run_id, "grade")["refused"])


async def test_a_promoted_lesson_todays_scan_flags_enters_no_prompt(
    client: Client, task_queue: str
) -> None:
    name = "gate-rescan"
    flagged = add(name, PROBES[0][0])  # promoted before the scan knew the form
    good = add(name, "Always state the units of every number.")
    done = await run(client, task_queue, plan_from(spec(name)), "gate-rescan-1")
    system = system_of(attempts(done.run_id, "answer")[0])
    assert "- Always state the units of every number." in system
    assert PROBES[0][0] not in system
    data = loaded(done.run_id, "answer")
    assert data["ids"] == [good]
    assert any(r.startswith(f"{flagged}: today's immune scan") for r in data["refused"])


_FAILED_ONCE: set[str] = set()


@activity.defn(name="reward_lessons")
async def fake_reward_lessons_lost_reply(reward: LessonsReward) -> int:
    """The real reward_lessons whose first reply per key is lost (it raises after storing)."""
    new = await asyncio.to_thread(_reward, reward)
    if reward.key not in _FAILED_ONCE:
        _FAILED_ONCE.add(reward.key)
        raise RuntimeError("the worker died before it answered")
    return new


async def test_each_stage_rewards_its_lessons_once_with_its_evidence(
    client: Client, task_queue: str
) -> None:
    name = "lessons-reward"
    good = add(name, "Always state the units of every number.")
    other = add(name, "Mention the weather.", stage="other")
    activities = [a for a in ACTIVITIES if a is not reward_lessons]
    activities.append(fake_reward_lessons_lost_reply)
    done = await run(client, task_queue, plan_from(spec(name)), "lessons-reward-1", activities)
    assert done.state == "completed", done.stages
    lesson = TraceStore().heuristic(good)
    assert f"{done.run_id}/answer" in _FAILED_ONCE  # its first reply was lost: retried
    assert lesson is not None and lesson.uses == 1  # rewarded once
    score = done.outputs["grade"]["score"]
    # ``answer`` is judged: its lessons get the judge's score, not its own quality.
    assert lesson.alpha == pytest.approx(1 + score) and lesson.beta == pytest.approx(2 - score)
    assert lesson.last_used_at is not None
    (unjudged,) = attempts(done.run_id, "other")
    quality = unjudged.data["simulated_quality"]
    o = TraceStore().heuristic(other)
    assert o is not None and o.uses == 1 and o.alpha == pytest.approx(1 + quality)
    rewarded = [
        r
        for r in TraceStore().records(done.run_id)
        if r.kind == "memory" and r.status == "rewarded"
    ]
    assert {(r.stage_id, r.data["source"]) for r in rewarded} == {
        ("answer", "judge grade"),
        ("other", "simulated quality"),
    }


async def test_a_lesson_that_does_not_earn_its_place_retires(
    client: Client, task_queue: str
) -> None:
    name = "lessons-retire"
    weak = add(name, "Answer in French.")
    plan = plan_from(
        spec(name, "{embedding_model: lexical, min_uses: 2, retire_below: 0.5}", quality=0.05)
    ).model_copy()
    # No judge: the lesson earns the stage's own (low) simulated quality.
    plan = plan.model_copy(update={"stages": [s for s in plan.stages if s.id != "grade"]})
    await run(client, task_queue, plan, "lessons-retire-1")
    first = TraceStore().heuristic(weak)
    assert first is not None and first.status == "promoted" and first.uses == 1
    await run(client, task_queue, plan, "lessons-retire-2")
    second = TraceStore().heuristic(weak)
    assert second is not None and second.status == "retired" and second.uses == 2
    event = TraceStore().heuristic_events(weak)[-1]
    assert (event.from_status, event.to_status, event.by) == ("promoted", "retired", "utility")
    assert event.figures["uses"] == 2 and event.figures["alpha"] == pytest.approx(second.alpha)
    assert "retire_below 0.5" in event.reason
    done = await run(client, task_queue, plan, "lessons-retire-3")
    assert LESSONS_HEADING not in system_of(attempts(done.run_id, "answer")[0])


async def test_experience_off_injects_and_rewards_nothing(client: Client, task_queue: str) -> None:
    name = "lessons-off"
    good = add(name, "Always state the units of every number.")
    plan = plan_from(spec(name, "{enabled: false}"))
    done = await run(client, task_queue, plan, "lessons-off-1", lessons=[good])
    (answer,) = attempts(done.run_id, "answer")
    assert LESSONS_HEADING not in system_of(answer)
    assert not any(k.startswith("lesson:") for k in answer.inputs_provenance)
    assert not [r for r in TraceStore().records(done.run_id) if r.kind == "memory"]
    lesson = TraceStore().heuristic(good)
    assert lesson is not None and lesson.uses == 0


async def test_verification_runs_carry_lessons_but_never_reward_them(
    client: Client, task_queue: str
) -> None:
    name = "lessons-verify"
    good = add(name, "Always state the units of every number.")
    plan = plan_from(spec(name))
    done = await run(client, task_queue, plan, "lessons-verify-1", verification=True)
    assert "units" in system_of(attempts(done.run_id, "answer")[0])
    lesson = TraceStore().heuristic(good)
    assert lesson is not None and lesson.uses == 0 and lesson.alpha == 1.0


async def test_a_run_with_lessons_replays_from_its_history(client: Client, task_queue: str) -> None:
    name = "lessons-replay"
    add(name, "Always state the units of every number.")
    plan = plan_from(spec(name))
    done = await run(client, task_queue, plan, "lessons-replay-1")
    assert done.state == "completed", done.stages
    await assert_replays(client, "lessons-replay-1")


async def test_load_lessons_prefers_the_lesson_worded_like_the_task() -> None:
    """The activity's relevance (lexical embeddings here): with room for one lesson, the one
    like the task wins on (nearly) every seed; unlike ones still fill free room."""
    name = "lessons-relevance"
    units = add(name, "State the units of every number in the answer.")
    add(name, "Greet the customer warmly by their first name.")
    task = "Answer the question: how many metres is the number of units in a mile?"
    chosen = []
    for n in range(20):
        query = LessonsQuery(
            spec_name=name,
            stage_id="answer",
            task_text=task,
            top_k=1,
            seed=f"s{n}",
            embedding_model="lexical",
        )
        chosen.append((await load_lessons(query)).ids)
    assert sum(ids == [units] for ids in chosen) >= 18, chosen
    query = query.model_copy(update={"seed": "s", "top_k": 3})
    assert len((await load_lessons(query)).ids) == 2
