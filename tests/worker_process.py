"""A worker in its own process, for tests that kill workers: ``python -m tests.worker_process
ADDRESS TASK_QUEUE``.

Runs the interpreter with the real activities, except that ``llm_call`` is
``fake_llm_call_counting`` (the real one plus one line per execution in $ARMATURE_CALL_LOG).
Prints ``ready`` once connected and built, and shuts down cleanly on SIGTERM or SIGINT;
SIGKILL is the crash the durability tests simulate.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from activities.llm import llm_call
from armature_temporal.client import connect
from tests.fakes import fake_llm_call_counting
from worker import ACTIVITIES, build_worker

READY = "ready"


async def serve(address: str, task_queue: str) -> None:
    client = await connect(address)
    activities = [fake_llm_call_counting, *(a for a in ACTIVITIES if a is not llm_call)]
    worker = build_worker(client, task_queue, activities=activities)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with worker:
        print(READY, flush=True)
        await stop.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.worker_process ADDRESS TASK_QUEUE", file=sys.stderr)
        return 2
    asyncio.run(serve(argv[0], argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
