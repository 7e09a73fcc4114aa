"""Gate decision proofs (issue #25 item 2): who decided a gate is what a proof made with the
trace key vouches for, bound to the run, the gate, the decision and the wait, never what the
payload says."""

from __future__ import annotations

import asyncio
import os
import pwd
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from armature_temporal.runtime.gate_auth import check_decision, os_user, sign_decision
from armature_temporal.runtime.models import GateDecision
from armature_temporal.store.keys import load_key

SINCE = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NOW = SINCE + timedelta(minutes=5)


def _received(decision: GateDecision) -> GateDecision:
    """As the run's handlers keep it: the sent name is only a claim."""
    return decision.model_copy(update={"by": "signal", "claimed_by": decision.by})


def _check(key: object, run_id: str, decision: GateDecision, since: datetime = SINCE) -> object:
    return check_decision(key, run_id, _received(decision), since.isoformat(), now=NOW)  # type: ignore[arg-type]


def test_a_proof_names_who_the_signer_authenticated(tmp_path: Path) -> None:
    key = load_key(tmp_path / "trace.key", create=True)
    assert key is not None
    sent = GateDecision(stage="ship", decision="approve", comment="ok", by="alice")
    signed = sign_decision(key, "run-1", sent, now=NOW)
    checked = _check(key, "run-1", signed)
    assert checked.by == "alice" and checked.problem is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("run_id", "change", "why"),
    [
        ("run-2", {}, "does not match this run, gate"),  # another run
        ("run-1", {"stage": "other"}, "does not match this run, gate"),  # another gate
        ("run-1", {"decision": "reject"}, "does not match"),
        ("run-1", {"comment": "sure"}, "does not match"),
        ("run-1", {"by": "mallory"}, "does not match"),  # the name swapped under a proof
    ],
)
def test_a_proof_does_not_check_for_anything_it_was_not_made_for(
    tmp_path: Path, run_id: str, change: dict[str, str], why: str
) -> None:
    key = load_key(tmp_path / "trace.key", create=True)
    assert key is not None
    signed = sign_decision(
        key, "run-1", GateDecision(stage="ship", decision="approve", by="alice"), now=NOW
    )
    checked = _check(key, run_id, signed.model_copy(update=change))
    assert checked.by is None and why in (checked.problem or "")  # type: ignore[attr-defined]


def test_a_proof_made_before_the_wait_or_in_the_future_does_not_check(tmp_path: Path) -> None:
    key = load_key(tmp_path / "trace.key", create=True)
    assert key is not None
    sent = GateDecision(stage="ship", decision="approve", by="alice")
    early = sign_decision(key, "run-1", sent, now=SINCE - timedelta(hours=1))
    checked = _check(key, "run-1", early)
    assert checked.by is None and "earlier wait" in (checked.problem or "")  # type: ignore[attr-defined]
    late = sign_decision(key, "run-1", sent, now=NOW + timedelta(hours=1))
    checked = _check(key, "run-1", late)
    assert checked.by is None and "in the future" in (checked.problem or "")  # type: ignore[attr-defined]
    # Within the allowed clock skew of the wait's start, it checks.
    skewed = sign_decision(key, "run-1", sent, now=SINCE - timedelta(seconds=60))
    assert _check(key, "run-1", skewed).by == "alice"  # type: ignore[attr-defined]


def test_another_key_or_none_is_named_and_does_not_check(tmp_path: Path) -> None:
    ours = load_key(tmp_path / "a" / "trace.key", create=True)
    theirs = load_key(tmp_path / "b" / "trace.key", create=True)
    assert ours is not None and theirs is not None
    sent = GateDecision(stage="ship", decision="approve", by="alice")
    signed = sign_decision(theirs, "run-1", sent, now=NOW)
    checked = _check(ours, "run-1", signed)
    assert checked.by is None and "another trace key" in (checked.problem or "")  # type: ignore[attr-defined]
    checked = _check(None, "run-1", signed)
    assert checked.by is None and "no trace key" in (checked.problem or "")  # type: ignore[attr-defined]
    # The trace key itself (not the derived one) makes no valid proof either.
    forged = signed.model_copy(
        update={"proof": signed.proof.model_copy(update={"mac": ours.tagged("gate_decision", "x")})}  # type: ignore[union-attr]
    )
    assert _check(ours, "run-1", forged).by is None  # type: ignore[attr-defined]


def test_the_cli_user_is_the_account_of_the_uid_not_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("LOGNAME", "alice")
    assert os_user() == pwd.getpwuid(os.getuid()).pw_name


def test_an_unprivileged_user_is_named_by_its_uid_and_cannot_sign_without_the_key(
    tmp_path: Path,
) -> None:
    """As another uid (here: nobody, dropped to in a child process) the decider is that
    account, and a key it cannot read is refused before anything is sent, naming the key."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to another uid in a child process")
    import concurrent.futures.thread  # noqa: F401  (imported lazily; nobody cannot read it)

    from armature_temporal.service.client import GateAuthError, _signed

    home = tmp_path / "home"
    os.environ["ARMATURE_HOME"] = str(home)  # the autouse fixture restores it
    assert load_key(home / "trace.key", create=True) is not None
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, report, exit without running pytest's teardown
        try:
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            try:
                asyncio.run(_signed("run-1", GateDecision(stage="s", decision="approve", by="x")))
                said = "signed"
            except GateAuthError as exc:
                said = str(exc)
            os.write(write, f"{os_user()}\n{said}".encode())
        except BaseException as exc:  # anything else: said, so the parent's assert shows it
            os.write(write, f"error\n{exc!r}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        user, said = pipe.read().split("\n", 1)
    os.waitpid(pid, 0)
    assert user == "nobody"
    assert "cannot decide gate 's' of run 'run-1' as 'x'" in said
    assert str(home / "trace.key") in said and "nothing was sent" in said
