"""Heartbeat while an activity awaits slow work, so cancellation reaches it and a dead worker is
noticed after the heartbeat timeout instead of the whole start-to-close timeout."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from temporalio import activity

__all__ = ["heartbeating"]


@contextlib.asynccontextmanager
async def heartbeating(interval_s: float = 2.0) -> AsyncIterator[None]:
    """Send a heartbeat every ``interval_s`` seconds while the block runs.

    The first one goes after ``interval_s``, not at once: work that ends sooner (a simulated or
    cached reply, a quick tool) costs the server no heartbeat call, and the heartbeat timeout
    (10 s) still notices a lost worker.
    """

    async def beat() -> None:
        while True:
            await asyncio.sleep(interval_s)
            activity.heartbeat()

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
