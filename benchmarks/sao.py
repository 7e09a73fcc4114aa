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

Not measured here: paired runs of a spec with the adapter (the fine-tune workflow's second
check), because a ``simulate`` judge cannot read a local model's replies.

Run ``python benchmarks/sao.py [--seeds 3] [--steps 60] [--beta 0.1] [--eval-share 0.3]
[--json]``; about 15 s per seed on one core (needs the finetune extra).
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--beta", type=float, default=0.1)
    parser.add_argument("--eval-share", type=float, default=0.3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
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
