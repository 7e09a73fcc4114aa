"""The spec's network grant and program environment (issue #25 item 2): ``sandbox.allow_network``
and ``sandbox.env`` act with their armature-agents 0.7.0 meaning, ``network:`` on a stage grants
or withholds per stage, the grant reaches the plan, and ``armature validate`` names the grant a
spec needs (or says loopback is never reachable)."""

from __future__ import annotations

import pytest

from armature_temporal.errors import SpecError
from armature_temporal.spec.loader import load_spec_text
from tests.fakes import plan_from

SHELL_CURL = "tool: {name: shell, args: {argv: [curl, -sS, 'https://example.com/data.json']}}"


def _warnings(text: str) -> list[str]:
    return [str(w) for w in load_spec_text(text).warnings]


def test_allow_network_grants_every_stage_and_a_stage_can_withhold_it() -> None:
    plan = plan_from(
        f"""\
name: grants
sandbox: {{allow_network: true, env: {{PIP_INDEX_URL: "https://pypi.example.com/simple"}}}}
stages:
  - id: fetch
    {SHELL_CURL}
  - id: offline
    network: false
    tool: {{name: shell, args: {{argv: [ls]}}}}
"""
    )
    assert plan.stage("fetch").network is True
    assert plan.stage("offline").network is False
    assert plan.sandbox_env == {"PIP_INDEX_URL": "https://pypi.example.com/simple"}


def test_without_a_grant_no_stage_has_network_and_a_stage_grant_is_its_own() -> None:
    plan = plan_from(
        f"""\
name: grants
stages:
  - id: fetch
    network: true
    {SHELL_CURL}
  - id: look
    tool: {{name: shell, args: {{argv: [ls]}}}}
"""
    )
    assert (plan.stage("fetch").network, plan.stage("look").network) == (True, False)
    assert plan.sandbox_env == {}


@pytest.mark.parametrize(
    "name", ["HOME", "TMPDIR", "HTTPS_PROXY", "http_proxy", "ARMATURE_CONTEXT"]
)
def test_sandbox_env_cannot_set_what_the_sandbox_sets(name: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec_text(
            f"name: t\nsandbox: {{env: {{{name}: x}}}}\nstages:\n  - id: a\n"
            "    tool: {name: shell, args: {argv: [ls]}}\n"
        )
    assert f"{name!r} is set by the sandbox" in str(info.value), info.value


def test_a_shell_stage_that_needs_the_network_names_the_grant_to_add() -> None:
    text = f"name: t\nstages:\n  - id: fetch\n    {SHELL_CURL}\n"
    (warning,) = [w for w in _warnings(text) if "needs the network" in w]
    assert "stages[0].tool.args.argv" in warning
    assert "add `network: true` to stage 'fetch'" in warning
    assert "sandbox: {allow_network: true}" in warning
    granted = text.replace("  - id: fetch\n", "  - id: fetch\n    network: true\n")
    assert not [w for w in _warnings(granted) if "network" in w]
    spec_wide = "sandbox: {allow_network: true}\n" + text
    assert not [w for w in _warnings(spec_wide) if "network" in w]


@pytest.mark.parametrize(
    "command",
    [
        "argv: [git, clone, 'https://github.com/org/repo']",
        "argv: [pip, install, requests]",
        "cmd: 'python3 fetch.py --from https://api.example.com/v1'",
        "argv: [rsync, -a, 'deploy@build.example.com:out/', out]",
        "argv: [wget, -q, example.com]",
    ],
)
def test_programs_and_addresses_that_need_the_network_are_recognised(command: str) -> None:
    text = f"name: t\nstages:\n  - id: s\n    tool: {{name: shell, args: {{{command}}}}}\n"
    assert [w for w in _warnings(text) if "needs the network" in w], command


def test_a_local_program_gets_no_network_warning() -> None:
    text = "name: t\nstages:\n  - id: s\n    tool: {name: shell, args: {argv: [git, status]}}\n"
    assert not [w for w in _warnings(text) if "network" in w]


@pytest.mark.parametrize("host", ["localhost:8233", "127.0.0.1:5432", "[::1]:7233"])
def test_loopback_in_a_programs_args_says_it_is_never_reachable(host: str) -> None:
    text = (
        "name: t\nsandbox: {allow_network: true}\nstages:\n  - id: s\n"
        f"    tool: {{name: shell, args: {{argv: [curl, 'http://{host}/api']}}}}\n"
    )
    (warning,) = [w for w in _warnings(text) if "never reachable" in w]
    assert "http_request" in warning and "http_allow_hosts" in warning, warning


def test_an_adapter_that_needs_the_network_names_the_stage_that_runs_it() -> None:
    text = """\
name: t
adapters:
  sync: {type: script, cmd: "git pull origin main"}
stages:
  - id: update
    adapter: sync
"""
    (warning,) = [w for w in _warnings(text) if "needs the network" in w]
    assert "adapters.sync.cmd" in warning and "stage 'update'" in warning, warning


def test_a_granted_program_that_does_not_speak_http_through_a_proxy_is_warned() -> None:
    text = (
        "name: t\nstages:\n  - id: s\n    network: true\n"
        "    tool: {name: shell, args: {argv: [ssh, build.example.com, make]}}\n"
    )
    (warning,) = [w for w in _warnings(text) if "HTTP proxy" in w]
    assert "'ssh'" in warning and "HTTP(S) through the egress proxy only" in warning


def test_network_on_a_stage_that_runs_no_program_does_nothing_and_says_so() -> None:
    text = "name: t\nstages:\n  - id: ok\n    network: true\n    gate: {message: go?}\n"
    (warning,) = [w for w in _warnings(text) if "network" in w]
    assert "runs none, so it does nothing" in warning


def test_the_older_docker_fields_still_warn_and_allow_network_and_env_do_not() -> None:
    text = """\
name: t
sandbox:
  mode: docker
  image: python:3.11-slim
  allow_network: false
  env: {PYTHONUNBUFFERED: "1"}
stages:
  - id: a
    tool: {name: shell, args: {argv: [ls]}}
"""
    warned = [w for w in _warnings(text) if "sandbox." in w]
    assert sorted(w.split(": ")[1] for w in warned) == ["sandbox.image", "sandbox.mode"]
    assert all("restricted subprocess" in w for w in warned)
    assert plan_from(text).sandbox_env == {"PYTHONUNBUFFERED": "1"}


def test_a_spec_without_grants_keeps_its_plan_bytes_and_hashes() -> None:
    """network and sandbox_env are newer than most plans: left out while unused, so such a
    plan keeps its bytes, spec_hash and policy_version (and older workers read it); a grant
    is part of the policy."""
    text = "name: t\nstages:\n  - id: s\n    tool: {name: shell, args: {argv: [ls]}}\n"
    plain = plan_from(text)
    assert '"network"' not in plain.to_json() and '"sandbox_env"' not in plain.to_json()
    granted = plan_from(text.replace("  - id: s\n", "  - id: s\n    network: true\n"))
    assert '"network":true' in granted.to_json()
    assert granted.spec_hash != plain.spec_hash
    assert granted.policy_version != plain.policy_version
    withheld = plan_from(text.replace("  - id: s\n", "  - id: s\n    network: false\n"))
    assert withheld.policy_version == plain.policy_version


def test_a_tool_call_without_grants_is_sent_as_before() -> None:
    """A tools worker from before grants (its inputs forbid unknown fields) still reads every
    call that uses none; a granted call carries them."""
    from armature_temporal.runtime.models import AdapterCallInput, ToolCallInput
    from armature_temporal.spec.plan import PlanAdapter

    plain = ToolCallInput(run_id="r", stage_id="s", tool="shell")
    assert not {"network", "sandbox_env"} & set(plain.model_dump(mode="json"))
    granted = plain.model_copy(update={"network": True, "sandbox_env": {"A": "1"}})
    again = ToolCallInput.model_validate_json(granted.model_dump_json())
    assert (again.network, again.sandbox_env) == (True, {"A": "1"})
    adapter = AdapterCallInput(
        run_id="r", stage_id="s", spec_name="t", adapter=PlanAdapter(name="a", type="script")
    )
    assert not {"network", "sandbox_env"} & set(adapter.model_dump(mode="json"))
