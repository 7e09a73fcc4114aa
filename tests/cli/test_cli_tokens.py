"""`armature tokens create|list|revoke`, run as a user runs them: the token printed once (and
only the hash stored), listings that never show secrets, revocation, refusals that say what to
do."""

from __future__ import annotations

import json

import pytest

from armature_temporal.store import TraceStore
from tests.fakes import run_armature


async def test_tokens_create_list_revoke() -> None:
    created = await run_armature("tokens", "create", "ci-bot", "--scope", "run", "-s", "read")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    assert token.startswith("arm_") and len(token) == 47
    assert "shown this once" in created.stderr and "Authorization: Bearer" in created.stderr

    as_json = await run_armature("tokens", "create", "alice", "--scope", "approve", "--json")
    assert as_json.returncode == 0, as_json.stderr
    made = json.loads(as_json.stdout)
    assert (made["name"], made["scopes"]) == ("alice", ["approve"])

    store = TraceStore()
    try:
        principal = store.principal_for(token)
        assert principal is not None and principal.name == "ci-bot"
    finally:
        store.close()

    listed = await run_armature("tokens", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert token not in listed.stdout and made["token"] not in listed.stdout
    rows = {t["name"]: t for t in json.loads(listed.stdout)["tokens"]}
    assert rows["ci-bot"]["scopes"] == ["read", "run"] and rows["ci-bot"]["active"] is True
    assert rows["ci-bot"]["last_used_at"] is not None  # the look-up above used it

    table = await run_armature("tokens", "list")
    assert "ci-bot" in table.stdout and "read,run" in table.stdout and token not in table.stdout

    revoked = await run_armature("tokens", "revoke", "ci-bot")
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked token 'ci-bot'" in revoked.stdout
    # Again: it said "revoked" a second time, as if it had done something.
    again = await run_armature("tokens", "revoke", "ci-bot")
    assert again.returncode == 2 and again.stdout == ""
    assert "token 'ci-bot' is already revoked" in again.stderr and "nothing changed" in again.stderr
    store = TraceStore()
    try:
        assert store.principal_for(token) is None
        assert store.active_token_count() == 1
    finally:
        store.close()


async def test_tokens_refusals_name_the_value_and_the_fix() -> None:
    bad_scope = await run_armature("tokens", "create", "x", "--scope", "aprove")
    assert bad_scope.returncode == 2
    assert "unknown scope 'aprove' (did you mean 'approve'?)" in bad_scope.stderr
    assert (await run_armature("tokens", "create", "x", "--scope", "read")).returncode == 0
    taken = await run_armature("tokens", "create", "x", "--scope", "read")
    assert taken.returncode == 2 and "a token named 'x' exists already" in taken.stderr
    unknown = await run_armature("tokens", "revoke", "nobody", "--json")
    assert unknown.returncode == 1
    assert "no token named 'nobody'" in json.loads(unknown.stdout)["error"]


@pytest.mark.parametrize(
    "name",
    [
        "loopback",
        "signal",
        "timeout",
        "Signal",
        "TIMEOUT",
        "system",
        "anonymous",
        "armature",
        "armature-improve",
        "Armature.bot",
    ],
)
async def test_names_armature_records_for_its_own_deciders_are_refused(name: str) -> None:
    """#25: a gate decision records its token's name as ``by``, so a token called "signal"
    or "timeout" made a person's decision read as an unauthenticated signal or a timeout."""
    done = await run_armature("tokens", "create", name, "--scope", "approve")
    assert done.returncode == 2, done.stdout
    assert f"token name {name!r} is reserved" in done.stderr
    assert "name the token after who uses it" in done.stderr
    assert "arm_" not in done.stdout
    listed = await run_armature("tokens", "list", "--json")
    assert json.loads(listed.stdout)["tokens"] == []


@pytest.mark.parametrize("name", ["", " ", "ci\tbot", "ci\x07bot", "ci bot"])
async def test_empty_blank_and_control_character_names_are_refused(name: str) -> None:
    done = await run_armature("tokens", "create", name, "--scope", "read")
    assert done.returncode == 2, done.stdout
    assert "is not allowed: use 1-64 letters" in done.stderr
