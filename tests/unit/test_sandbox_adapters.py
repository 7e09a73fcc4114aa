"""Script adapters run in the same sandbox as the shell tool: a context too large for the
environment reaches the script as a read-only file (it lives in the worker's /tmp, which the
script's private /tmp covers), the spec's sandbox.env and a network grant reach it, and a
script that fails for want of a network is told which grant to add."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from activities.adapters import CONTEXT_ENV_MAX, _Refused, _run_script
from armature_temporal.spec.plan import PlanAdapter
from armature_temporal.tools.sandbox import sandbox

READ_CONTEXT = (
    "import json, os; path = os.environ['ARMATURE_CONTEXT_FILE']; data = json.load(open(path));"
    "\ntry:\n open(path, 'w').write('x'); wrote = True\nexcept OSError:\n wrote = False\n"
    "print(json.dumps({'size': len(data['big']), 'wrote': wrote, 'tmp': path.startswith('/tmp'),"
    " 'extra': os.environ.get('EXTRA'), 'proxy': 'HTTPS_PROXY' in os.environ}))"
)


@pytest.fixture(autouse=True)
def _isolated() -> None:
    if not sandbox().isolated:
        pytest.skip(f"no sandbox here ({sandbox().note})")


async def test_a_large_context_reaches_the_script_read_only(tmp_path: Path) -> None:
    big = "x" * (CONTEXT_ENV_MAX + 10)
    adapter = PlanAdapter(name="reader", type="script", parse="json")
    out = await _run_script(
        "reader",
        [sys.executable, "-c", READ_CONTEXT],
        json.dumps({"big": big}),
        tmp_path,
        adapter,
        network=True,
        extra_env={"EXTRA": "from sandbox.env"},
    )
    assert out == {
        "size": len(big),
        "wrote": False,
        "tmp": True,
        "extra": "from sandbox.env",
        "proxy": True,
    }, out


async def test_a_script_without_network_is_told_which_grant_to_add(tmp_path: Path) -> None:
    fetch = (
        "import socket, sys\ntry:\n socket.create_connection(('example.com', 443), timeout=3)\n"
        "except OSError as e:\n sys.exit(f'could not connect: {e}')"
    )
    adapter = PlanAdapter(name="fetch", type="script", parse="json")
    with pytest.raises(_Refused) as refused:
        await _run_script("fetch", [sys.executable, "-c", fetch], "{}", tmp_path, adapter)
    message = str(refused.value)
    assert "could not connect" in message and "network: true" in message, message
    assert refused.value.output["hint"], refused.value.output
