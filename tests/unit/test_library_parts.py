"""The library call's pure parts: how a closed run becomes RunFailed, and events() handing
over to service.events.follow_events (replaced here by a fake_ module)."""

from __future__ import annotations

import sys
import types
from collections.abc import AsyncIterator
from typing import Any

import pytest

from armature_temporal.library import RunHandle, failure_of
from armature_temporal.runtime.models import GateDecision, StageResult
from armature_temporal.service.client import RunView


def test_failure_names_the_failed_stage_and_the_runs_reason() -> None:
    view = RunView(
        run_id="r-1",
        spec_name="s",
        status="failed",
        state="failed",
        reason="stage 'b' failed: output invalid",
        stages={
            "a": StageResult(status="completed", output=1),
            "b": StageResult(status="failed", error="output invalid"),
        },
        outputs={"a": 1},
    )
    failed = failure_of(view)
    assert (failed.run_id, failed.state, failed.stage) == ("r-1", "failed", "b")
    assert failed.reason == "stage 'b' failed: output invalid" and failed.outputs == {"a": 1}
    assert str(failed).startswith("run r-1 ended failed at stage 'b': stage 'b' failed")


def test_a_rejection_without_a_reason_gives_the_gates_comment() -> None:
    decision = GateDecision(stage="ok", decision="reject", comment="wrong tone")
    view = RunView(
        run_id="r-2",
        spec_name="s",
        status="failed",
        state="rejected",
        stages={"ok": StageResult(status="rejected", gate=decision)},
    )
    failed = failure_of(view)
    assert (failed.state, failed.stage, failed.reason) == ("rejected", "ok", "wrong tone")


async def test_events_delegate_to_follow_events_with_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[Any, str, int]] = []

    async def fake_follow_events(client: Any, run_id: str, *, after: int = 0) -> AsyncIterator[int]:
        calls.append((client, run_id, after))
        for seq in range(after + 1, 4):
            yield seq

    module = types.ModuleType("armature_temporal.service.events")
    module.follow_events = fake_follow_events  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "armature_temporal.service.events", module)
    client = object()
    handle = RunHandle(client, "r-3")  # type: ignore[arg-type]
    assert [seq async for seq in handle.events(after=1)] == [2, 3]
    assert calls == [(client, "r-3", 1)]
