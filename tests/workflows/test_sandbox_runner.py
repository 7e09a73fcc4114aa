"""The worker's sandbox runner answers every payload's context as the SDK's own runner does.

``FastSandboxRunner`` (workflows/sandbox_runner.py) skips the SDK's compile-and-exec for
the per-payload context lookups. These tests run one workflow that makes every kind of command
with a payload we use (activity, local activity, child workflow, memo, summaries, a signal to
another workflow) under both runners, with a payload codec and an external-storage driver
that record each context they are given, and compare.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import (
    ExternalStorage,
    PayloadCodec,
    SerializationContext,
    StorageDriver,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    WithSerializationContext,
)
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from worker import workflow_runner
from workflows.sandbox_runner import FastSandboxRunner, fast_path_available

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: (context kind, activity type, is_local, workflow id, direction, payload text) for each
#: payload converted under a serialization context.
SEEN: list[tuple[str, str | None, bool | None, str | None, str, str]] = []
#: (target workflow id, target type) for each payload sent to external storage.
STORED: list[tuple[str | None, str | None]] = []
#: Makes a payload larger than the external-storage threshold (64 bytes); results stay under.
PAD = "-" * 100


class FakeRecordingCodec(PayloadCodec, WithSerializationContext):
    """A codec that changes nothing, noting which serialization context encoded or decoded
    which payload (the worker picks the context per command, through the workflow instance)."""

    context: tuple[str, str | None, bool | None, str | None] | None = None

    def with_context(self, context: SerializationContext) -> FakeRecordingCodec:
        bound = FakeRecordingCodec()
        bound.context = (
            type(context).__name__,
            getattr(context, "activity_type", None),
            getattr(context, "is_local", None),
            getattr(context, "workflow_id", None),
        )
        return bound

    def _note(self, direction: str, payloads: Sequence[Payload]) -> list[Payload]:
        if self.context is not None:
            for payload in payloads:
                SEEN.append((*self.context, direction, payload.data.decode(errors="replace")))
        return list(payloads)

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self._note("out", payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self._note("in", payloads)


class FakeMemoryDriver(StorageDriver):
    """External storage in a dict, noting each store target."""

    def __init__(self) -> None:
        self.blobs: dict[str, Payload] = {}

    def name(self) -> str:
        return "fake-memory"

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        target = context.target
        claims = []
        for payload in payloads:
            STORED.append((getattr(target, "id", None), getattr(target, "type", None)))
            key = str(len(self.blobs))
            self.blobs[key] = payload
            claims.append(StorageDriverClaim(claim_data={"key": key}))
        return claims

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        return [self.blobs[c.claim_data["key"]] for c in claims]


@activity.defn(name="fake_probe_echo")
async def fake_probe_echo(text: str) -> str:
    return text.rstrip("-").upper()


@workflow.defn(name="FakeContextProbe")
class FakeContextProbe:
    def __init__(self) -> None:
        self.pinged: list[str] = []

    @workflow.signal
    def ping(self, text: str) -> None:
        self.pinged.append(text)

    @workflow.run
    async def run(self, child: str) -> list[str]:
        if child:
            await workflow.wait_condition(lambda: bool(self.pinged))
            return self.pinged
        got = [
            await workflow.execute_activity(
                fake_probe_echo,
                "remote" + PAD,
                start_to_close_timeout=timedelta(seconds=10),
                summary="an activity",
            ),
            await workflow.execute_local_activity(
                fake_probe_echo,
                "local" + PAD,
                start_to_close_timeout=timedelta(seconds=10),
                summary="a local activity",
            ),
        ]
        workflow.upsert_memo({"probe": {"got": got, "pad": PAD}})
        kid = await workflow.start_child_workflow(
            FakeContextProbe.run, PAD, id=f"{workflow.info().workflow_id}-child"
        )
        await workflow.get_external_workflow_handle(kid.id).signal(FakeContextProbe.ping, "hi")
        await kid
        return got


def _normalised(prefix: str) -> tuple[Counter[Any], Counter[Any]]:
    def name(wid: str | None) -> str | None:
        return wid.replace(prefix, "<probe>") if wid else wid

    seen = Counter(
        (kind, act, local, name(wid), way, name(text)) for kind, act, local, wid, way, text in SEEN
    )
    stored = Counter((name(wid), kind) for wid, kind in STORED)
    return seen, stored


async def _probe(client: Client, runner: SandboxedWorkflowRunner, prefix: str) -> Any:
    SEEN.clear()
    STORED.clear()
    converter = dataclasses.replace(
        pydantic_data_converter,
        payload_codec=FakeRecordingCodec(),
        external_storage=ExternalStorage(drivers=[FakeMemoryDriver()], payload_size_threshold=64),
    )
    recording = Client(client.service_client, namespace=client.namespace, data_converter=converter)
    queue = f"{prefix}-queue"
    async with Worker(
        recording,
        task_queue=queue,
        workflows=[FakeContextProbe],
        activities=[fake_probe_echo],
        workflow_runner=runner,
    ):
        result = await recording.execute_workflow(
            FakeContextProbe.run,
            "",
            id=prefix,
            task_queue=queue,
            execution_timeout=timedelta(seconds=60),
            result_type=list[str],
        )
    assert result == ["REMOTE", "LOCAL"], result
    return _normalised(prefix)


async def test_the_fast_runner_gives_every_payload_the_sdks_context(
    client: Client, task_queue: str
) -> None:
    assert fast_path_available(), (
        "temporalio's sandbox no longer has the shape FastSandboxRunner relies on "
        "(temporalio.worker.workflow_sandbox._runner._Instance): read the new SDK's runner and "
        "update workflows/sandbox_runner.py"
    )
    restrictions = SandboxRestrictions.default.with_passthrough_modules("armature_temporal")
    stock = await _probe(client, SandboxedWorkflowRunner(restrictions=restrictions), task_queue)
    fast = await _probe(client, FastSandboxRunner(restrictions=restrictions), f"{task_queue}-fast")
    seen, stored = fast
    # Not vacuous: each kind of context was asked for.
    kinds = {(kind, local) for kind, _, local, *_ in seen}
    assert ("ActivitySerializationContext", False) in kinds, seen
    assert ("ActivitySerializationContext", True) in kinds, seen
    assert any(
        kind == "WorkflowSerializationContext" and wid == "<probe>-child"
        for kind, _, _, wid, *_ in seen
    ), seen
    assert ("<probe>", "FakeContextProbe") in stored and (
        "<probe>-child",
        "FakeContextProbe",
    ) in stored, stored
    # Each payload converted under the same context by both runners. How often a payload is
    # converted follows how many workflow tasks the child needs (its start and the signal may
    # share one task or not), so the pairs are compared, not their counts.
    stock_seen, stock_stored = stock
    assert set(seen) == set(stock_seen), (seen, stock_seen)
    assert set(stored) == set(stock_stored), (stored, stock_stored)


async def test_the_worker_runs_workflows_in_the_fast_runner() -> None:
    assert isinstance(workflow_runner(strict=False), FastSandboxRunner)
    assert isinstance(workflow_runner(strict=True), FastSandboxRunner)
