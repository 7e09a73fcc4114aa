"""``armature learn``: one round of the experience loop, now (Learn and improve)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from armature_temporal.commands._common import (
    LEARN,
    AddressOpt,
    JsonFlag,
    QueueOpt,
    SpecArg,
    fail,
    load_or_exit,
    out,
    run_round,
)

app = typer.Typer()


def render_learn(result: Any) -> list[str]:
    """The round as lines of plain text: outcome, heuristics retired because their stage is
    gone, those today's immune scan flagged, distilled lessons, decisions with figures
    (re-verifications too)."""
    lines = [f"{result.status}: {result.detail}"]
    for r in result.retired:
        lines.append(f"  {r.heuristic_id} [{r.stage_id}]  retired (stage gone)")
        lines.append(f"    {r.reason}")
    for r in result.rescreened:
        lines.append(f"  {r.heuristic_id}  {r.status} (screened again): {r.text}")
        lines += [f"    scan: {f}" for f in r.findings]
    for a in result.admitted:
        where = f" into {a.merged_into}" if a.merged_into else ""
        lines.append(f"  distilled {a.heuristic_id} [{a.stage_id}] {a.outcome}{where}: {a.text}")
        lines += [f"    scan: {f}" for f in a.findings]
    for d in result.decisions:
        f = d.figures
        lines.append(
            f"  {d.heuristic_id}  {d.verdict}  delta {f.get('delta', 0):+.3f}  95% "
            f"[{f.get('ci_low', 0):+.3f}, {f.get('ci_high', 0):+.3f}]  Holm alpha "
            f"{f.get('alpha_adj', 0):.4f} [{f.get('adj_ci_low', 0):+.3f}, "
            f"{f.get('adj_ci_high', 0):+.3f}]  n={f.get('n', 0)}"
        )
        lines.append(f"    {d.reason}")
    return lines


@app.command(rich_help_panel=LEARN)
def learn(
    spec: SpecArg,
    verify_runs: Annotated[
        int | None,
        typer.Option(
            "--verify-runs",
            min=2,
            max=100,
            help="Recent inputs each heuristic is replayed on (default: the spec's "
            "experience.verify_runs).",
        ),
    ] = None,
    max_tests: Annotated[
        int,
        typer.Option(
            "--max-tests",
            min=1,
            max=20,
            help="Heuristics replay-tested per round: quarantined ones first, then promoted "
            "ones due for re-verification.",
        ),
    ] = 3,
    wait: Annotated[
        bool, typer.Option("--wait/--no-wait", help="Wait for the round and print it.")
    ] = True,
    address: AddressOpt = None,
    queue: QueueOpt = None,
    as_json: JsonFlag = False,
) -> None:
    """Run one round of the experience loop on a spec now.

    Distils lessons from the spec's recent runs (their critic and judge scores) on the
    distiller tier, admits them to memory (immune scan, near-duplicates merged, the rest
    quarantined), and replay-tests up to --max-tests quarantined heuristics: each recent
    input (never one of a run in which a gate was rejected) is run with the promoted
    heuristics and with those plus the one under test (no gate is approved: a gated stage and
    what follows it are not executed; tool approvals are refused; nothing is rewarded). A
    heuristic is
    promoted only when its paired HQS gain's Holm-adjusted interval lies above 0, else
    rejected. Slots left re-verify promoted heuristics last verified over
    experience.reverify_after_days ago (the promoted set without one against all of it): it
    stays promoted if it still helps, else it is retired; promoted heuristics whose stage left
    the spec are retired. `armature memory show ID` shows the figures. `armature schedule SPEC` runs
    rounds on experience.schedule. Exits 0 when the round finished (whatever it found), 1
    when it failed, 2 on a spec without an experience section.
    """
    import uuid

    compiled = load_or_exit(spec)
    if compiled.experience is None:
        raise fail(
            f"error: {spec}: spec {compiled.name!r} has no experience section, so nothing is "
            "learnt; add one, e.g.\n  experience:\n    enabled: true",
            2,
        )
    from armature_temporal.experience.learning import LearnInput, LearnResult

    result = run_round(
        "Learn",
        LearnInput(
            spec_text=spec.read_text(encoding="utf-8"),
            spec_path=str(spec.resolve()),
            verify_runs=verify_runs,
            max_tests=max_tests,
        ),
        LearnResult,
        f"learn-{compiled.name}-{uuid.uuid4().hex[:8]}",
        f"learning round for spec {compiled.name!r}",
        wait=wait,
        address=address,
        queue=queue,
        as_json=as_json,
    )
    if result is None:
        return
    for line in render_learn(result):
        out.print(line, markup=False, highlight=False)
