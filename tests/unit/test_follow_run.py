"""`armature submit --wait` follows a run by polling its state; the run's close wakes it at
once, so a short run does not wait out the poll interval (#27 item 2). Fakes stand in for the
client and the state query; the poll interval is set to an hour, so only the close can end
the wait."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from armature_temporal.commands import run_view
from armature_temporal.service import client as service_client


class FakeHandle:
    def __init__(self, closed: asyncio.Event, fails: bool) -> None:
        self.closed, self.fails = closed, fails

    async def result(self) -> Any:
        await self.closed.wait()
        if self.fails:
            raise RuntimeError("workflow failed")
        return {}


class FakeClient:
    def __init__(self, fails: bool = False) -> None:
        self.closed = asyncio.Event()
        self.fails = fails

    def get_workflow_handle(self, run_id: str) -> FakeHandle:
        return FakeHandle(self.closed, self.fails)


def view(status: str) -> Any:
    return SimpleNamespace(status=status, reason=None, stages={}, pending_gates=[])


@pytest.mark.parametrize("fails", [False, True])
async def test_a_run_closing_wakes_the_follower_before_the_next_poll(
    monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    fake = FakeClient(fails)
    polls: list[str] = []

    async def fake_show_run(client: Any, run_id: str) -> Any:
        polls.append(run_id)
        if len(polls) == 1:
            asyncio.get_running_loop().call_soon(fake.closed.set)  # it ends just after
            return view("running")
        return view("failed" if fails else "completed")

    monkeypatch.setattr(service_client, "show_run", fake_show_run)
    monkeypatch.setattr(run_view, "POLL_S", 3600.0)
    # The guard only keeps a broken follower from hanging the suite: a follower that waited
    # out the poll interval would take an hour.
    final = await asyncio.wait_for(run_view.follow_run(fake, "r-1"), timeout=60)
    assert final.status == ("failed" if fails else "completed")
    assert polls == ["r-1", "r-1"]


async def test_a_follower_whose_close_watch_fails_at_once_still_polls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that cannot wait for the result (it raises at once) must not make the follower
    spin: it falls back to polling at the interval."""
    states = iter(["running", "running", "completed"])

    class Broken(FakeClient):
        def get_workflow_handle(self, run_id: str) -> Any:
            raise RuntimeError("no handle")

    async def fake_show_run(client: Any, run_id: str) -> Any:
        return view(next(states))

    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def counting_sleep(seconds: float) -> None:
        slept.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(service_client, "show_run", fake_show_run)
    monkeypatch.setattr(run_view, "POLL_S", 0.25)
    monkeypatch.setattr(asyncio, "sleep", counting_sleep)
    final = await asyncio.wait_for(run_view.follow_run(Broken(), "r-2"), timeout=60)
    assert final.status == "completed"  # after exactly three polls (a fourth has no state)
    assert slept and set(slept) == {0.25}  # once the watch has ended: the interval, no spin
