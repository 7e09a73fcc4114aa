"""A stage's ``bandit:`` block on a real Temporal dev server: decisions filed per context (run
inputs, an embedding bucket), the ladder shown by ``armature bandit status``, and an arm bred
by ``armature bandit evolve`` that later runs execute from its stored definition."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from temporalio.client import Client

from activities.bandit import runtime_for
from armature_temporal.store import TraceStore
from armature_temporal.views import load_runs
from tests.fakes import plan_from, start
from worker import build_worker

pytestmark = pytest.mark.asyncio(loop_scope="session")
ARMATURE = str(Path(sys.executable).parent / "armature")
REPO = Path(__file__).resolve().parents[2]

CONTEXT_SPEC = """\
name: ctx_arms
inputs:
  type: object
  properties:
    audience: {type: string, default: expert}
    question: {type: string, default: how do tides work}
model_tiers:
  small: {provider: simulate, quality: 0.55}
  large: {provider: simulate, quality: 0.8}
  frontier: {provider: simulate, quality: 0.95}
stages:
  - id: answer
    role: {description: "Answer for a {{ inputs.audience }} reader: {{ inputs.question }}"}
    arms:
      - {arm_id: fast, model_tier: small}
      - {arm_id: thorough, model_tier: large}
    bandit:
      context: {inputs: [audience], embedding: {input: question, buckets: 4}}
  - id: judge
    depends_on: [answer]
    role: {type: judge, model_tier: frontier, description: "Score: {{ answer.content }}"}
"""

EVOLVE_SPEC = """\
name: evo_arms
inputs:
  type: object
  properties:
    question: {type: string, default: how do tides work}
model_tiers:
  small: {provider: simulate, quality: 0.5}
  large: {provider: simulate, quality: 0.6}
  frontier: {provider: simulate, quality: 0.95}
stages:
  - id: answer
    role: {description: "Answer: {{ inputs.question }}"}
    arms:
      - {arm_id: plain, model_tier: large}
      - arm_id: careful
        model_tier: small
        description: "Answer: {{ inputs.question }}. Check every figure against its source."
    bandit:
      evolve: {after: 6, min_pulls: 2, budget: 3, max_arms: 4}
  - id: judge
    depends_on: [answer]
    role: {type: judge, model_tier: frontier, description: "Score: {{ answer.content }}"}
"""


async def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "250"}
    return await asyncio.to_thread(
        subprocess.run, [ARMATURE, *args], capture_output=True, text=True, env=env
    )


async def _run_all(
    client: Client, plan: Any, task_queue: str, runs: dict[str, dict[str, Any]]
) -> None:
    """Start every run (run id → inputs) at once, then wait for all of them."""
    handles = [
        await start(client, plan, task_queue, inputs, run_id=run_id)
        for run_id, inputs in runs.items()
    ]
    await asyncio.gather(*(h.result() for h in handles))


async def _until_every_arm_has(
    client: Client, plan: Any, task_queue: str, name: str, pulls: int
) -> None:
    """Run on, five runs at a time, until every arm of bandit `name` has `pulls` pulls.

    Evolution breeds from two arms with `min_pulls` each, and Thompson sampling may give one
    arm nearly all of a first batch; a user would run more, and so does the test.
    """
    runtime = runtime_for(name)
    for extra in range(0, 40, 5):
        if min(a.pulls for a in runtime.arms()) >= pulls:
            return
        await _run_all(
            client,
            plan,
            task_queue,
            {
                f"{name.replace(':', '-')}-x{extra + i}": {"question": f"x {extra + i}"}
                for i in range(5)
            },
        )
    assert min(a.pulls for a in runtime.arms()) >= pulls, [
        (a.arm_id, a.pulls) for a in runtime.arms()
    ]


def _decision_contexts(name: str) -> dict[str, str]:
    runtime = runtime_for(name)
    with runtime.backend.engine.begin() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            text("SELECT decision_id, context FROM bandit_decisions WHERE name = :n"), {"n": name}
        )
        return {r[0]: r[1] for r in rows}


async def test_decisions_are_filed_per_context_and_the_ladder_shows_each_unlock(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    plan = plan_from(CONTEXT_SPEC)
    audiences = ["novice" if i % 2 else "expert" for i in range(20)]
    async with build_worker(client, task_queue):
        for batch in range(2):
            await _run_all(
                client,
                plan,
                task_queue,
                {
                    f"ctx-{i}": {"audience": audiences[i], "question": "how do tides work"}
                    for i in range(batch * 10, batch * 10 + 10)
                },
            )
    contexts = _decision_contexts("ctx_arms:answer")
    assert len(contexts) == 20
    keys = set()
    for i, audience in enumerate(audiences):
        key = contexts[f"ctx_arms:answer@ctx-{i}"]
        fields = dict(part.split("=", 1) for part in key.split(";"))
        assert fields["audience"] == audience
        (bucket_field,) = [f for f in fields if f.startswith("question~")]
        keys.add(key)
    # One question: one embedding bucket; so one key per audience.
    assert len(keys) == 2, keys
    assert bucket_field in ("question~local", "question~lexical")
    store = TraceStore()
    used = set()  # (audience, arm): each a distinct prompt and tier, so a distinct reply
    for i in range(20):
        (stage,) = [r for r in store.records(f"ctx-{i}") if r.kind == "stage" and r.arm_id]
        assert stage.tier == {"fast": "small", "thorough": "large"}[stage.arm_id]
        used.add((audiences[i], stage.arm_id))
    spec = tmp_path / "ctx.yaml"
    spec.write_text(CONTEXT_SPEC)
    shown = await _cli("bandit", "status", str(spec), "--json")
    assert shown.returncode == 0, shown.stderr
    (entry,) = json.loads(shown.stdout)["stages"]
    rungs: dict[tuple[str, Any], dict[str, Any]] = {
        (r["rung"], r.get("context")): r for r in entry["ladder"]
    }
    assert rungs[("thompson", None)]["status"] == "unlocked"
    assert rungs[("thompson", None)]["unlocked_at"]
    for key in keys:  # 10 rewarded decisions each: unlock_after's default
        assert rungs[("context", key)]["status"] == "unlocked", entry["ladder"]
        assert rungs[("context", key)]["unlocked_at"] >= rungs[("thompson", None)]["unlocked_at"]
    assert rungs[("evolution", None)]["status"] == "off"
    assert rungs[("fine-tune", None)]["status"] == "off"  # no finetune block
    # With one, the fine-tune and SAO rungs count the store as those loops count it.
    (tmp_path / "model").mkdir()
    tuned = tmp_path / "ctx-ft.yaml"
    tuned.write_text(CONTEXT_SPEC + "finetune: {base_model: ./model, min_examples: 2}\n")
    ft = await _cli("bandit", "status", str(tuned), "--json")
    assert ft.returncode == 0, ft.stderr
    ladder = {r["rung"]: r for r in json.loads(ft.stdout)["stages"][0]["ladder"]}
    replies, need = (int(x) for x in ladder["fine-tune"]["progress"].split("/"))
    # One question, two audiences, two arms: as many distinct replies as (audience, arm)
    # pairs Thompson sampling chose (4 when it tried both arms for both; at least 2).
    assert need == 2 and replies == len(used) >= 2, (replies, used)
    assert ladder["fine-tune"]["status"] == "unlocked"
    finished = {r.finished_at for r in load_runs(store, spec="ctx_arms", limit=100)}
    assert ladder["fine-tune"]["unlocked_at"] in finished
    # finetune.method defaults to sft: no DPO round runs, so the sao rung is off and says why
    # (its pairs still counted) ...
    pairs = int(ladder["sao"]["progress"].split("/")[0])
    assert ladder["sao"]["status"] == "off" and ladder["sao"]["unlocked_at"] is None
    assert ladder["sao"]["threshold"].startswith("finetune.method is 'sft': no DPO round runs")
    # ... with method dpo it unlocks on the same count.
    dpo = tmp_path / "ctx-dpo.yaml"
    dpo.write_text(CONTEXT_SPEC + "finetune: {base_model: ./model, min_examples: 3, method: dpo}\n")
    shown_dpo = await _cli("bandit", "status", str(dpo), "--json")
    assert shown_dpo.returncode == 0, shown_dpo.stderr
    sao = {r["rung"]: r for r in json.loads(shown_dpo.stdout)["stages"][0]["ladder"]}["sao"]
    assert sao["progress"] == f"{pairs}/3"
    assert sao["status"] == ("unlocked" if pairs >= 3 else "locked")
    assert sum(a["pulls"] for a in entry["arms"]) == 20
    board = await _cli("dashboard", str(spec), "--json")
    assert board.returncode == 0, board.stderr
    (on_board,) = json.loads(board.stdout)["bandits"]
    assert on_board["ladder"] == entry["ladder"]  # the dashboard shows the same ladder
    page = tmp_path / "board.html"
    drawn = await _cli("dashboard", str(spec), "--html", str(page))
    assert drawn.returncode == 0, drawn.stderr
    html = page.read_text()
    block = html.split('id="bandit-ladder">')[1].split("</script>")[0]
    assert json.loads(block)[0]["ladder"] == entry["ladder"]
    assert "Ladder: ctx_arms:answer" in html and "audience=novice" in html
    table = await _cli("bandit", "status", str(spec))
    assert table.returncode == 0 and "ladder" in table.stdout and "audience=novice" in table.stdout


async def test_an_arm_bred_by_evolve_is_run_from_its_stored_definition(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    spec = tmp_path / "evo.yaml"
    spec.write_text(EVOLVE_SPEC)
    plan = plan_from(EVOLVE_SPEC)
    async with build_worker(client, task_queue):
        await _run_all(
            client, plan, task_queue, {f"evo-{i}": {"question": f"q {i}"} for i in range(10)}
        )
        await _until_every_arm_has(client, plan, task_queue, "evo_arms:answer", 2)
        bred = await _cli("bandit", "evolve", str(spec), "--json")
        assert bred.returncode == 0, bred.stderr
        (line, *_) = json.loads(bred.stdout)["done"]
        assert "evolution on" in line and "bred ['evo.g1." in line, line
        runtime = runtime_for("evo_arms:answer")
        (child,) = [r for r in runtime.backend.arm_records(runtime.name) if r.origin == "evolved"]
        definition = child.params["_arm"]
        store = TraceStore()
        seen: list[Any] = []
        for batch in range(6):  # until Thompson sampling tries the new arm
            await _run_all(
                client,
                plan,
                task_queue,
                {f"evo-{batch}-{i}": {"question": f"r {batch}-{i}"} for i in range(10)},
            )
            seen = [
                r
                for b in range(batch + 1)
                for i in range(10)
                for r in store.records(f"evo-{b}-{i}")
                if r.kind == "stage" and r.arm_id == child.arm_id
            ]
            if seen:
                break
    assert seen, "the bred arm was never chosen in 60 runs"
    assert seen[0].tier == definition["model_tier"]
    assert seen[0].status == "completed"
    status = await _cli("bandit", "status", str(spec), "--json")
    (entry,) = json.loads(status.stdout)["stages"]
    arms = {a["arm_id"]: a for a in entry["arms"]}
    assert arms[child.arm_id]["origin"] == "evolved" and arms[child.arm_id]["pulls"] >= 1
    evolution = next(r for r in entry["ladder"] if r["rung"] == "evolution")
    assert evolution["status"] == "unlocked" and evolution["unlocked_at"]


REWRITE_SPEC = EVOLVE_SPEC.replace(
    "      evolve: {after: 6, min_pulls: 2, budget: 3, max_arms: 4}\n",
    "      evolve: {after: 6, min_pulls: 2, budget: 3, max_arms: 4, mutate_prompt: true}\n"
    "    simulate:\n"
    "      pitfalls:\n"
    "        - {id: unchecked, penalty: 0.3, rate: 0.9, symptom: a figure nobody checked,\n"
    "           lesson: check every figure against its source}\n",
).replace("name: evo_arms", "name: rewrite_arms")


async def test_the_refiner_rewrites_the_best_arms_prompt_from_the_worst_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    assert "mutate_prompt: true" in REWRITE_SPEC
    spec = tmp_path / "rewrite.yaml"
    spec.write_text(REWRITE_SPEC)
    plan = plan_from(REWRITE_SPEC)
    async with build_worker(client, task_queue):
        await _run_all(
            client, plan, task_queue, {f"rw-{i}": {"question": f"q {i}"} for i in range(12)}
        )
        await _until_every_arm_has(client, plan, task_queue, "rewrite_arms:answer", 2)
    done = await _cli("bandit", "evolve", str(spec), "--json")
    assert done.returncode == 0, done.stderr
    runtime = runtime_for("rewrite_arms:answer")
    (event,) = [e for e in runtime.events() if e.kind in ("arm_bred", "arm_refused")]
    assert event.kind == "arm_bred", event.detail
    assert event.detail["how"] == "prompt rewritten by the refiner"
    child = event.detail["arm"]
    # The simulated refiner read the symptom in the worst runs and stated the pitfall's lesson.
    assert "check every figure against its source" in child["prompt"].lower()
    best = max(runtime.arms(), key=lambda a: a.mean if a.origin == "config" else -1)
    assert child["model_tier"] == {"plain": "large", "careful": "small"}[best.arm_id]


async def test_spec_arms_live_on_redis_when_armature_bandit_url_says_so(
    client: Client, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    import redis

    url = os.environ.get("ARMATURE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    server = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        server.ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis server at {url} ({exc}); start redis-server to run this test")
    name = f"redis_arms_{uuid.uuid4().hex[:8]}"
    text_ = CONTEXT_SPEC.replace("name: ctx_arms", f"name: {name}")
    monkeypatch.setenv("ARMATURE_BANDIT_URL", url)
    plan = plan_from(text_)
    try:
        async with build_worker(client, task_queue):
            await _run_all(
                client,
                plan,
                task_queue,
                {
                    f"{name}-{i}": {"audience": "novice" if i % 2 else "expert", "question": "q"}
                    for i in range(6)
                },
            )
        runtime = runtime_for(f"{name}:answer")
        assert runtime.backend.kind == "redis"
        assert sum(a.pulls for a in runtime.arms()) == 6
        contexts = runtime.backend.contexts(runtime.name)  # type: ignore[attr-defined]
        assert [c.split(";")[0] for c in contexts] == ["audience=expert", "audience=novice"]
        spec = tmp_path / "redis.yaml"
        spec.write_text(text_)
        shown = await _cli("bandit", "status", str(spec), "--json")  # the env travels along
        assert shown.returncode == 0, shown.stderr
        (entry,) = json.loads(shown.stdout)["stages"]
        assert sum(a["pulls"] for a in entry["arms"]) == 6
        assert {r.get("context") for r in entry["ladder"] if r["rung"] == "context"} == set(
            contexts
        )
    finally:
        for key in server.scan_iter(match=f"armature:bandit:{{{name}:answer}}:*"):
            server.delete(key)
