"""Adapter stages (``adapters:`` + ``adapter:``) on a real Temporal dev server: scripts run
without a shell (a templated value is one argument), in the workspace, without the worker's
secrets, under the safety policy (block, approval), within their timeout; Python callables run
with typed arguments. The interpreter's ``Adapters`` runs them here through the harness."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from armature_temporal.runtime.models import RunResult
from armature_temporal.service.client import decide_gate
from armature_temporal.settings import workspace_root
from armature_temporal.spec.compiler import Plan
from armature_temporal.spec.models import SafetyRule
from armature_temporal.store import TraceStore
from armature_temporal.tools._shell import ENV_PASSTHROUGH
from tests.fakes import plan_from, wait_for_gate
from tests.workflows.collaborators_harness import harness_worker, start_harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

PY = json.dumps(sys.executable)
#: A script that prints its arguments (after the program) as a JSON object.
ARGV_SCRIPT = "import json, sys; print(json.dumps({'argv': sys.argv[1:]}))"
ENV_SCRIPT = "import json, os; print(json.dumps(dict(os.environ)))"


def spec(adapters: str, stages: str, extra: str = "") -> str:
    return f"name: adapters-test\n{extra}adapters:\n{adapters}\nstages:\n{stages}"


def with_rules(plan: Plan, rules: list[dict[str, Any]]) -> Plan:
    """The plan with these safety rules. (Set on the plan: the spec checks do not yet accept a
    rule naming an adapter, which a rule on an adapter must.)"""
    return plan.model_copy(update={"safety_rules": [SafetyRule.model_validate(r) for r in rules]})


async def run(
    client: Client,
    task_queue: str,
    text: str,
    inputs: dict[str, Any] | None = None,
    *,
    rules: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> RunResult:
    plan = with_rules(plan_from(text), rules or [])
    async with harness_worker(client, task_queue):
        handle = await start_harness(client, task_queue, plan, inputs, **kw)
        result: RunResult = await asyncio.wait_for(handle.result(), timeout=60)
    return result


def tool_records(run_id: str) -> list[Any]:
    return [r for r in TraceStore().records(run_id) if r.kind == "tool"]


async def test_a_templated_value_is_one_argument_and_never_shell_syntax(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    canary = tmp_path / "canary"
    canary.write_text("still here")
    payload = f'"; rm -rf {canary} #$(touch {tmp_path}/pwned) `id`'
    text = spec(
        f"""  echo_args:
    type: script
    cmd: [{PY}, "-c", "{ARGV_SCRIPT}", "{{{{ inputs.payload }}}}", "--n={{{{ inputs.n }}}}"]
    parse: json""",
        "  - id: echo\n    adapter: echo_args",
    )
    result = await run(client, task_queue, text, {"payload": payload, "n": 3})
    assert result.state == "completed", result.stages["echo"]
    assert result.outputs["echo"] == {"argv": [payload, "--n=3"]}
    assert canary.read_text() == "still here"
    assert not (tmp_path / "pwned").exists()
    (call,) = tool_records(result.run_id)
    assert call.data["tool"] == "echo_args" and call.status == "completed"
    assert call.data["policy_action"] == "allow"


async def test_a_script_sees_its_context_but_not_the_workers_secrets(
    client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARMATURE_TEST_SECRET", "s3cr3t-value")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-scripts")
    text = spec(
        f"""  env_dump:
    type: script
    cmd: [{PY}, "-c", "{ENV_SCRIPT}"]
    parse: json""",
        "  - id: first\n    adapter: env_dump\n"
        "  - id: second\n    adapter: env_dump\n    depends_on: [first]",
    )
    result = await run(client, task_queue, text, {"topic": "kelp"})
    assert result.state == "completed", result.stages
    env = result.outputs["second"]
    assert "ARMATURE_TEST_SECRET" not in env and "OPENAI_API_KEY" not in env
    assert "s3cr3t-value" not in json.dumps(result.outputs)
    assert set(env) <= {*ENV_PASSTHROUGH, "ARMATURE_CONTEXT"}
    context = json.loads(env["ARMATURE_CONTEXT"])
    # As in armature-agents 0.7.0: run inputs by name, upstream outputs by stage id.
    assert context["topic"] == "kelp" and context["inputs"] == {"topic": "kelp"}
    assert context["first"]["PATH"] == env["PATH"]


async def test_a_shell_adapter_quotes_every_value_and_runs_in_the_workspace(
    client: Client, task_queue: str
) -> None:
    text = spec(
        """  note:
    type: script
    shell: true
    cmd: "echo {{ inputs.line }} > note.txt && cat note.txt | tr a-z A-Z\"""",
        "  - id: write\n    adapter: note",
    )
    result = await run(client, task_queue, text, {"line": "ab; touch pwned $(id)"})
    assert result.state == "completed", result.stages["write"]
    assert result.outputs["write"]["stdout"] == "AB; TOUCH PWNED $(ID)\n"
    assert result.outputs["write"]["exit_code"] == 0
    workspace = workspace_root("adapters-test")
    assert (workspace / "note.txt").read_text() == "ab; touch pwned $(id)\n"
    assert not (workspace / "pwned").exists()
    (call,) = tool_records(result.run_id)
    assert call.data["tool"] == "note"


async def test_a_rule_on_cmd_blocks_the_adapter_before_it_runs(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    target = tmp_path / "precious"
    target.mkdir()
    (target / "data.txt").write_text("keep me")
    text = spec(
        """  wipe:
    type: script
    cmd: ["rm", "-rf", "{{ inputs.target }}"]""",
        "  - id: clean\n    adapter: wipe",
    )
    rule = {
        "tool": "wipe",
        "condition": {"field": "cmd", "op": "matches_regex", "value": r"rm\s+-rf"},
        "action": "block",
        "message": "no recursive deletes",
    }
    result = await run(client, task_queue, text, {"target": str(target)}, rules=[rule])
    clean = result.stages["clean"]
    assert result.state == "failed"
    assert clean.status == "failed" and clean.error_type == "policy_blocked", clean
    assert "wipe" in (clean.error or "") and "no recursive deletes" in (clean.error or "")
    assert (target / "data.txt").read_text() == "keep me"
    (call,) = tool_records(result.run_id)
    assert call.data["policy_action"] == "block" and call.data["policy_rule"] == 0
    assert call.output["args"]["argv"] == ["rm", "-rf", str(target)]


async def test_require_approval_waits_for_a_person_and_runs_once_approved(
    client: Client, task_queue: str
) -> None:
    text = spec(
        f"""  publish:
    type: script
    cmd: [{PY}, "-c", "{ARGV_SCRIPT}", "{{{{ inputs.where }}}}"]
    parse: json""",
        "  - id: ship\n    adapter: publish",
    )
    rule = {"tool": "publish", "action": "require_approval", "message": "publishing needs a person"}
    plan = with_rules(plan_from(text), [rule])
    async with harness_worker(client, task_queue):
        approved = await start_harness(client, task_queue, plan, {"where": "prod"})
        status = await wait_for_gate(approved, "ship")
        assert "publishing needs a person" in status.pending_gates[0].message
        assert '"argv": ["' in status.pending_gates[0].message  # what would run
        await decide_gate(client, approved.id, "ship", "approve", by="ops")
        done: RunResult = await asyncio.wait_for(approved.result(), timeout=30)

        rejected = await start_harness(client, task_queue, plan, {"where": "prod"})
        await wait_for_gate(rejected, "ship")
        await decide_gate(client, rejected.id, "ship", "reject", comment="not today", by="ops")
        refused: RunResult = await asyncio.wait_for(rejected.result(), timeout=30)
    assert done.state == "completed" and done.outputs["ship"] == {"argv": ["prod"]}
    calls = tool_records(done.run_id)
    assert [(c.data["policy_action"], c.data["approved"]) for c in calls] == [
        ("require_approval", False),
        ("require_approval", True),
    ]
    ship = refused.stages["ship"]
    assert ship.status == "failed" and ship.error_type == "policy_blocked"
    assert "rejected by ops: not today" in (ship.error or "")
    assert "ship" not in refused.outputs


async def test_parse_json_fails_the_stage_naming_the_adapter_and_its_exit(
    client: Client, task_queue: str
) -> None:
    script = "import sys; print('half a line'); sys.stderr.write('boom'); sys.exit(3)"
    text = spec(
        f"""  flaky:
    type: script
    cmd: [{PY}, "-c", "{script}"]
    parse: json
  listy:
    type: script
    cmd: [{PY}, "-c", "print([1, 2])"]
    parse: json
  plain:
    type: script
    cmd: [{PY}, "-c", "{script}"]""",
        "  - id: a\n    adapter: flaky\n  - id: b\n    adapter: listy\n"
        "  - id: c\n    adapter: plain",
    )
    result = await run(client, task_queue, text)
    a, b, c = (result.stages[s] for s in "abc")
    assert a.status == "failed" and a.error_type == "tool_error"
    assert "adapter 'flaky' exited 3 (parse: json): boom" in (a.error or "")
    assert b.status == "failed" and "adapter 'listy'" in (b.error or "")
    assert "must print one JSON object, got list" in (b.error or "")
    # Without parse: json a non-zero exit is the script's answer, not a failure (as in 0.7.0).
    assert c.status == "completed"
    assert result.outputs["c"] == {
        "stdout": "half a line\n",
        "stderr": "boom",
        "exit_code": 3,
        "truncated": False,
    }


async def test_a_script_past_its_timeout_is_killed_and_the_stage_times_out(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    marker = tmp_path / "finished"
    script = f"import time, pathlib; time.sleep(20); pathlib.Path({str(marker)!r}).touch()"
    text = spec(
        f"""  slow:
    type: script
    cmd: [{PY}, "-c", "{script}"]
    timeout: 1s""",
        "  - id: wait\n    adapter: slow",
    )
    started = asyncio.get_running_loop().time()
    result = await run(client, task_queue, text)
    wait = result.stages["wait"]
    assert wait.status == "failed" and wait.error_type == "timeout", wait
    assert "adapter 'slow': killed after 1s" in (wait.error or "")
    assert asyncio.get_running_loop().time() - started < 15
    await asyncio.sleep(0.5)
    assert not marker.exists()


async def test_python_adapters_get_typed_arguments_and_return_any_json(
    client: Client, task_queue: str
) -> None:
    text = spec(
        """  add:
    type: python
    fn: tests.fakes:fake_adapter_sum
    args: {a: "{{ inputs.a }}", b: 2}
  words:
    type: python
    fn: tests.fakes.fake_adapter_words
    args: {text: "{{ inputs.text }} and more"}
  broken:
    type: python
    fn: tests.fakes:fake_adapter_raises
    args: {reason: "no luck"}
  missing:
    type: python
    fn: tests.fakes:no_such_function
""",
        "  - id: sum\n    adapter: add\n  - id: split\n    adapter: words\n"
        "  - id: fail\n    adapter: broken\n  - id: absent\n    adapter: missing",
    )
    result = await run(client, task_queue, text, {"a": 40, "text": "kelp forests"})
    assert result.outputs["sum"] == {"sum": 42, "types": ["int", "int"]}
    assert result.outputs["split"] == ["kelp", "forests", "and", "more"]
    fail, absent = result.stages["fail"], result.stages["absent"]
    assert fail.status == "failed" and fail.error_type == "tool_error"
    assert "adapter 'broken'" in (fail.error or "") and "ValueError: no luck" in (fail.error or "")
    assert absent.status == "failed" and "cannot import fn" in (absent.error or "")
    calls = {r.data["tool"]: r for r in tool_records(result.run_id)}
    assert calls["add"].output == {"sum": 42, "types": ["int", "int"]}
    assert calls["words"].output == {"result": ["kelp", "forests", "and", "more"]}


async def test_a_verification_run_never_runs_an_adapter(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    made = tmp_path / "made"
    text = spec(
        """  touch:
    type: script
    cmd: ["touch", "{{ inputs.path }}"]""",
        "  - id: make\n    adapter: touch",
    )
    result = await run(client, task_queue, text, {"path": str(made)}, verification=True)
    make = result.stages["make"]
    assert make.status == "failed" and make.error_type == "policy_blocked"
    assert "verification run" in (make.error or "")
    assert not made.exists()


async def test_an_arg_that_does_not_render_fails_the_stage_saying_which(
    client: Client, task_queue: str
) -> None:
    text = spec(
        """  greet:
    type: script
    cmd: ["echo", "hello {{ inputs.nobody }}"]""",
        "  - id: hello\n    adapter: greet",
    )
    result = await run(client, task_queue, text, {"somebody": "x"})
    hello = result.stages["hello"]
    assert hello.status == "failed" and hello.error_type == "template_error", hello
    assert (hello.error or "").startswith("stage 'hello': adapter 'greet': its cmd failed")
    assert "nobody" in (hello.error or "") and (hello.error or "").count("stage 'hello'") == 1
    assert tool_records(result.run_id) == []  # nothing ran
