"""The chaos run: do runs survive workers and a server that die under them?

40 runs of a 6-stage spec (five simulated model stages of 3 s each and a tool stage that
appends a line to a ledger file), started over 100 s on 2 worker processes; a worker is
SIGKILLed every 2–5 s for 2 minutes (its replacement started at once), and the Temporal dev
server (state in a file) is SIGKILLed and restarted on the same state once, halfway.

Reported: runs completed of runs started, worker kills, server restarts, the activity retries
Temporal made (attempts past the first), and "no activity completed twice" as
tests/chaos.py defines it: one ActivityTaskCompleted per scheduled activity and no failed one,
no stage scheduled again, one trace record per stage / attempt / tool call with every chain
intact, no LLM stage past its first attempt, and the ledger's lines (a tool execution killed
after its side effect and before Temporal heard of it runs again: those re-executions are
counted, and each must be explained by a tool retry). There is no baseline: the target is
every run completed and nothing completed twice.

    python benchmarks/chaos.py [--runs N] [--kill-for S] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos import ChaosConfig, ChaosReport, chaos


def table(report: ChaosReport) -> str:
    rows = [
        ("runs completed", f"{report.completed}/{report.runs}"),
        ("worker kills (SIGKILL)", report.worker_kills),
        ("server restarts", report.server_restarts),
        ("activity retries (Temporal attempts past the first)", report.activity_retries),
        ("most attempts of one activity", report.max_activity_attempt),
        ("activities completed twice", report.duplicate_completions),
        ("activities never completed", report.missing_completions),
        ("activities failed", report.failed_activities),
        ("stages scheduled again", report.rescheduled_stages),
        ("duplicate trace records", report.duplicate_records),
        ("LLM stages past their first attempt", report.stages_past_first_attempt),
        ("chain breaks", report.chain_breaks),
        (
            "tool side effects re-executed / tool retries",
            (f"{report.reexecuted_side_effects} / {report.tool_retries}"),
        ),
        ("tool side effects missing", report.missing_side_effects),
        ("wall time (s)", report.wall_s),
        ("target met", "yes" if report.ok else "NO"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines += [f"failed: {run}: {reason}" for run, reason in report.failed.items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--kill-for", type=float, default=120.0, help="seconds of kills")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = ChaosConfig(
        runs=args.runs,
        kill_for_s=args.kill_for,
        server_restart_at_s=args.kill_for / 2,
        start_over_s=args.kill_for * 5 / 6,
    )
    with tempfile.TemporaryDirectory(prefix="armature-chaos-") as tmp:
        report = asyncio.run(
            chaos(Path(tmp), config, log=lambda msg: print(msg, file=sys.stderr, flush=True))
        )
    print(json.dumps(report.as_dict(), indent=2) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
