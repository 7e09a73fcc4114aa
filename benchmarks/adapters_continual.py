"""Continual adapters and DoRA on the tiny model: forgetting of task A after training on B.

Two declared synthetic tasks over the same 24 nouns (``tiny.DEMO_NOUNS``), each an exact text
mapping:

- **A** — user ``What colour is the {thing}?`` → ``The {thing} is blue.``
- **B** — user ``Where is the {thing}?`` → ``The {thing} is under the table.``

For each seed (a fresh tiny model, ``create_tiny_model(seed=s)``, and that training seed):

1. a LoRA adapter is trained on A (``train_lora``; rank 8, ``--steps`` steps, lr 5e-3);
2. then on B three ways, each from that A adapter, with the same steps and learning rate:
   **plain** — the same adapter trained further on B (``resume_from``); **continual** — the
   A adapter frozen and merged, a zero-initialised delta trained on top with the
   orthogonality penalty (``continual_from``), once per ``orthogonality_weight`` in
   ``--weights`` (0: no penalty, only the frozen adapter and the zero-initialised delta);
3. a DoRA adapter is trained on A (``use_dora``) beside the LoRA one of step 1.

Measured, as mean reply-token cross-entropy on the held-out examples of each task (the hash
split ``train_lora`` uses, never trained on; ``heldout_loss``): A's loss with the A adapter
(before B) and with each B adapter (after B) — **forgetting** is the increase — and B's loss
with the base model and with each B adapter (**learning** is the decrease). Differences are
paired by seed: mean and 95% bootstrap interval over seeds (``paired_verdict``). The penalty
trades learning for remembering: read forgetting on A and learning on B together, per weight.
DoRA vs LoRA: A's held-out loss of each, paired by seed.

Run ``python benchmarks/adapters_continual.py [--seeds 5] [--steps 60]
[--weights 0,1,10,100] [--json]``; about 40 s per seed on one core (needs the finetune extra).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LEARNING_RATE = 5e-3
RANK = 8


def task(name: str) -> list[Any]:
    """The examples of task ``A`` or ``B`` (see the module docstring)."""
    from armature_temporal.finetune.models import Example
    from armature_temporal.finetune.tiny import DEMO_NOUNS

    ask, reply = {
        "A": ("What colour is the {t}?", "The {t} is blue."),
        "B": ("Where is the {t}?", "The {t} is under the table."),
    }[name]
    return [
        Example(
            messages=[{"role": "user", "content": ask.format(t=t)}],
            reply=reply.format(t=t),
            run_id=f"{name}-{t}",
            stage=name,
        )
        for t in DEMO_NOUNS
    ]


def one_seed(seed: int, steps: int, weights: Sequence[float], work: Path) -> dict[str, float]:
    """Every figure of one seed (losses; see the module docstring)."""
    from armature_temporal.finetune.models import TrainRequest
    from armature_temporal.finetune.tiny import create_tiny_model
    from armature_temporal.finetune.train import heldout_loss, train_lora

    base = str(create_tiny_model(work / f"tiny-{seed}", seed=seed))
    a, b = task("A"), task("B")

    def train(name: str, examples: list[Any], **extra: Any) -> str:
        out = str(work / f"{name}-{seed}")
        request = TrainRequest(
            base_model=base,
            examples=examples,
            out_dir=out,
            rank=RANK,
            max_steps=steps,
            learning_rate=LEARNING_RATE,
            seed=seed,
            **extra,
        )
        train_lora(request)
        return out

    lora_a = train("lora-A", a)
    dora_a = train("dora-A", a, use_dora=True)
    plain = train("plain-B", b, resume_from=lora_a)
    row = {
        "A_base": heldout_loss(base, None, a),
        "A_lora": heldout_loss(base, lora_a, a),
        "A_dora": heldout_loss(base, dora_a, a),
        "A_after_plain": heldout_loss(base, plain, a),
        "B_base": heldout_loss(base, None, b),
        "B_after_A": heldout_loss(base, lora_a, b),
        "B_plain": heldout_loss(base, plain, b),
    }
    for w in weights:
        continual = train(f"continual{w:g}-B", b, continual_from=lora_a, orthogonality_weight=w)
        row[f"A_after_continual_w{w:g}"] = heldout_loss(base, continual, a)
        row[f"B_continual_w{w:g}"] = heldout_loss(base, continual, b)
    return row


def _paired(rows: Sequence[dict[str, float]], base: str, other: str) -> dict[str, float]:
    """Mean of ``other − base`` over seeds and its 95% bootstrap interval."""
    from armature_temporal.improve.propose import paired_verdict

    diff, low, high = paired_verdict([r[base] for r in rows], [r[other] for r in rows])
    return {"mean": diff, "ci_low": low, "ci_high": high}


def summarise(rows: Sequence[dict[str, float]], weights: Sequence[float]) -> dict[str, Any]:
    """Means per figure, and the paired differences the docstring names (forgetting and
    learning: after − before, so forgetting is positive and learning negative)."""
    means = {k: round(sum(r[k] for r in rows) / len(rows), 4) for k in rows[0]}
    continual = {
        f"{w:g}": {
            "forgetting": _paired(rows, "A_lora", f"A_after_continual_w{w:g}"),
            "minus_plain_on_A": _paired(rows, "A_after_plain", f"A_after_continual_w{w:g}"),
            "learning": _paired(rows, "B_base", f"B_continual_w{w:g}"),
            "minus_plain_on_B": _paired(rows, "B_plain", f"B_continual_w{w:g}"),
        }
        for w in weights
    }
    return {
        "means": means,
        "forgetting_plain": _paired(rows, "A_lora", "A_after_plain"),
        "learning_plain": _paired(rows, "B_base", "B_plain"),
        "continual": continual,
        "dora_minus_lora_on_A": _paired(rows, "A_lora", "A_dora"),
        "dora_minus_base_on_A": _paired(rows, "A_base", "A_dora"),
    }


def _ci(d: dict[str, float]) -> str:
    return f"{d['mean']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds (tiny model and training)")
    parser.add_argument("--steps", type=int, default=60, help="optimiser steps per adapter")
    parser.add_argument(
        "--weights", default="0,1,10,100", help="orthogonality_weight values, comma-separated"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",") if w.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-adapters-") as tmp:
        for seed in range(args.seeds):
            print(f"seed {seed} ...", file=sys.stderr, flush=True)
            rows.append(one_seed(seed, args.steps, weights, Path(tmp)))
    report = {
        "seeds": args.seeds,
        "steps": args.steps,
        "orthogonality_weights": weights,
        "per_seed": rows,
        **summarise(rows, weights),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    m = report["means"]
    print(
        f"tiny model, {args.seeds} seeds, {args.steps} steps per adapter, rank {RANK}; held-out "
        "reply loss (mean token cross-entropy; lower is better); differences paired by seed, "
        "mean [95% bootstrap interval]"
    )
    print(f"task A: base {m['A_base']:.3f}, LoRA adapter {m['A_lora']:.3f}")
    print(
        f"task B: base {m['B_base']:.3f}, with the A adapter {m['B_after_A']:.3f}\n"
        "after training on B:      A loss  forgetting (A after − before)   "
        "B loss  learning (B after − base)"
    )
    print(
        f"  plain (same adapter)  {m['A_after_plain']:>7.3f}  "
        f"{_ci(report['forgetting_plain']):<30} {m['B_plain']:>7.3f}  "
        f"{_ci(report['learning_plain'])}"
    )
    for w in weights:
        c = report["continual"][f"{w:g}"]
        print(
            f"  continual, weight {w:<4g}{m[f'A_after_continual_w{w:g}']:>7.3f}  "
            f"{_ci(c['forgetting']):<30} {m[f'B_continual_w{w:g}']:>7.3f}  "
            f"{_ci(c['learning'])}"
        )
    print("continual − plain (paired):    on A (−: less forgetting)   on B (+: less learnt)")
    for w in weights:
        c = report["continual"][f"{w:g}"]
        print(
            f"  weight {w:<10g}            {_ci(c['minus_plain_on_A']):<30} "
            f"{_ci(c['minus_plain_on_B'])}"
        )
    print(
        f"DoRA vs LoRA on A: DoRA {m['A_dora']:.3f}, LoRA {m['A_lora']:.3f}, DoRA − LoRA "
        f"{_ci(report['dora_minus_lora_on_A'])}; DoRA − base {_ci(report['dora_minus_base_on_A'])}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
