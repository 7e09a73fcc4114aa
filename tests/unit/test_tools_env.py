"""The tools worker's environment is an allow-list (issue #25 item 9).

The deny-list let ``DB_PASS``, ``MYSQL_PWD`` and ``GH_PAT`` through to the tools child: names
that do not look like secrets to a list of words. Now only what a tools worker needs reaches it,
whatever the other names look like: the child ``armature worker`` starts, and a tools worker
started by hand (it drops the rest from its own environment and says what it was given).
"""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from armature_temporal.service import tools_child
from armature_temporal.service.tools_env import tools_worker_env

REPO = Path(__file__).resolve().parents[2]

#: What a worker's environment holds besides what a tools worker needs.
OTHERS = {
    "DB_PASS": "hunter2",
    "MYSQL_PWD": "hunter2",
    "GH_PAT": "github_pat_11AAAA",
    "FOO_CRED": "c2VjcmV0",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "OPENAI_API_KEY": "sk-1",
    "SENTRY_DSN": "https://public@o0.ingest.sentry.io/1",
    "BUILD_NUMBER": "17",
    "ARMATURE_DB_URL": "postgresql+psycopg://armature:pw@db.internal:5432/armature",
    "ARMATURE_WEBHOOK_SECRET": "w",
    "HTTPS_PROXY": "http://user:pw@proxy.internal:3128",
}
NEEDED = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/home/armature",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "PYTHONPATH": "/app",
    "VIRTUAL_ENV": "/app/.venv",
    "ARMATURE_HOME": "/data",
    "ARMATURE_TASK_QUEUE": "armature",
    "ARMATURE_PAYLOAD_DIR": "/shared/payloads",
    "TEMPORAL_ADDRESS": "temporal.internal:7233",
    "TEMPORAL_NAMESPACE": "default",
    "TEMPORAL_API_KEY": "needed-to-connect",
    "NO_PROXY": "localhost",
}


def test_only_what_a_tools_worker_needs_gets_through() -> None:
    env = tools_worker_env({**NEEDED, **OTHERS})
    for name in OTHERS:
        assert name not in env, name
    assert {k: env[k] for k in NEEDED} == NEEDED
    # The store's host (not its URL: a password) and Temporal's, for the egress proxy to refuse.
    assert env["ARMATURE_SERVICE_HOSTS"] == "db.internal,temporal.internal"
    assert set(env) == {*NEEDED, "ARMATURE_SERVICE_HOSTS"}


def test_a_name_listed_on_purpose_is_kept_and_an_sqlite_store_path_too() -> None:
    env = tools_worker_env(
        {
            **OTHERS,
            "ARMATURE_TOOLS_ENV_KEEP": "GH_PAT, BUILD_NUMBER",
            "ARMATURE_DB_URL": "sqlite:////data/armature.db",
        }
    )
    assert env["GH_PAT"] == OTHERS["GH_PAT"] and env["BUILD_NUMBER"] == "17"
    assert env["ARMATURE_DB_URL"] == "sqlite:////data/armature.db"  # a path the sandbox hides
    assert "DB_PASS" not in env and "MYSQL_PWD" not in env and "FOO_CRED" not in env


async def test_the_tools_child_is_started_with_the_allow_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {**NEEDED, **OTHERS}.items():
        monkeypatch.setenv(name, value)
    started: dict[str, Any] = {}

    async def fake_exec(*argv: str, **kw: Any) -> str:
        started.update(argv=argv, **kw)
        return "child"

    monkeypatch.setattr(asyncio, "create_subprocess_exec", fake_exec)
    await tools_child.start_tools_child("temporal.internal:7233", "armature")
    env = started["env"]
    assert "--tools-only" in started["argv"]
    assert not set(OTHERS) & set(env), set(OTHERS) & set(env)
    assert env[tools_child.PARENT_ENV] == str(os.getpid())


def test_a_tools_worker_started_by_hand_drops_the_rest_and_names_it() -> None:
    """``armature worker --tools-only`` keeps only the allow-list in its own environment (so a
    Python tool in the worker's process cannot read the rest either) and warns, naming the
    secret-looking variables first."""
    script = (
        "import os; from armature_temporal.commands.stack import _warn_about_secrets; "
        "_warn_about_secrets(); print(sorted(os.environ))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**NEEDED, **OTHERS, "PYTHONPATH": str(REPO), "PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    kept = ast.literal_eval(done.stdout)  # the printed list of names
    assert not set(OTHERS) & set(kept), kept
    assert "TEMPORAL_ADDRESS" in kept and "ARMATURE_HOME" in kept
    warning = " ".join(done.stderr.split())
    assert "DB_PASS" in warning and "MYSQL_PWD" in warning and "GH_PAT" in warning, warning
    assert "ARMATURE_TOOLS_ENV_KEEP" in warning


def test_the_compose_tools_worker_can_make_its_sandbox_and_no_other_service_is_widened() -> None:
    """The compose stack's tools worker runs as the image's unprivileged user with what
    Docker must allow before a user namespace can make the sandbox (CAP_SYS_ADMIN for the
    seccomp profile, no AppArmor mount ban, the real /proc paths); nothing else gets those, and
    nothing turns the sandbox off."""
    from ruamel.yaml import YAML

    compose = YAML(typ="safe").load((REPO / "docker-compose.temporal.yml").read_text())
    services = compose["services"]
    tools = services["armature-tools-worker"]
    assert tools["cap_add"] == ["SYS_ADMIN"]
    assert set(tools["security_opt"]) == {"apparmor=unconfined", "systempaths=unconfined"}
    assert "user" not in tools, "the worker runs as the image's unprivileged user"
    dockerfile = (REPO / "deploy" / "worker.Dockerfile").read_text()
    assert "\nUSER armature\n" in dockerfile
    env = tools["environment"]
    assert env.get("ARMATURE_SANDBOX", "auto") != "none"
    assert {"temporal", "postgresql"} <= set(env["ARMATURE_SERVICE_HOSTS"].split(","))
    for name, service in services.items():
        if name != "armature-tools-worker":
            assert "cap_add" not in service and "security_opt" not in service, name
